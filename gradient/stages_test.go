package gradient

// The tests combine gradient compressors with the lossy stages (qsgd,
// int8, fp16 ...); gradient itself does not link them.
import _ "github.com/tensorpress/tensorpress/lossy"
