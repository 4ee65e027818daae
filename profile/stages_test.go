package profile

// Profiles name stages; the program links them. The tests link the lossy
// stages that the built-in profiles and the test profiles name (lossless,
// sparse and gradient come with profile's own imports).
import _ "github.com/tensorpress/tensorpress/lossy"
