package rpc

// A receiver decodes whatever recipe a sender's policy chose: the package
// links the standard stages. (Gradient stages decode where a program links
// package gradient.)
import _ "github.com/tensorpress/tensorpress/stages"
