//go:build !(linux && (amd64 || arm64))

package gpu

import "runtime"

// bind reports that this platform has no binding: the CUDA driver is
// loaded on linux/amd64 and linux/arm64 only. The rest of the package
// builds everywhere, so a program that uses a GPU when there is one
// builds everywhere too.
func bind() error {
	return noDevice("no CUDA binding for "+runtime.GOOS+"/"+runtime.GOARCH, nil)
}
