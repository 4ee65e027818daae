//go:build !linux

package gpu

// threadID identifies the calling OS thread where the platform says;
// elsewhere every thread is 0 and the fake driver cannot tell them apart.
func threadID() int { return 0 }
