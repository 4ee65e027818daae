package transport

// The standard stages (package stages: lossless, sparse, lossy) are
// linked into every program that wraps a connection, so that a receiver
// decodes whatever a sender's policy may choose without importing the
// stage packages itself, and its hello announces them all. Gradient
// stages come with package gradient (a session links it).
import _ "github.com/tensorpress/tensorpress/stages"
