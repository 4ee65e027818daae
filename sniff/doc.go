// Package sniff tells kinds of data apart, cheaply, for the policies that
// choose a recipe per frame: Frame classifies a frame (its dtype, the
// element width found in opaque bytes, whether it is mostly zeros) from a
// few strips of its data; Cut finds where the kind of data changes in a
// byte stream, so that each frame holds one kind; ByClass is the policy
// that chooses a fixed recipe per class, with no measurement (the default
// of rpc's compressors and of the hub). autotune.Tuner keeps its
// measurements per Class.
//
// The package depends on codec, and links the stages ByClass names
// (lossless, sparse).
package sniff
