//go:build linux && (amd64 || arm64)

package gpu

import (
	"github.com/ebitengine/purego"
)

// bind loads libcuda.so.1 with dlopen (through purego: no cgo needed)
// and binds every function of symbols, after checking with dlsym that
// all of them are there (purego.RegisterLibFunc would panic on a
// missing one).
func bind() error {
	h, err := purego.Dlopen(libraryName, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		if err.Error() == "" {
			// dlerror's message is per thread and may be gone by the
			// time it is read (seen under the race detector).
			return noDevice(libraryName+": dlopen failed (the library is missing or does not load)", nil)
		}
		return noDevice("", err)
	}
	addrs := make([]uintptr, len(symbols))
	var missing []string
	for i, s := range symbols {
		a, err := purego.Dlsym(h, s.name)
		if err != nil || a == 0 {
			missing = append(missing, s.name)
			continue
		}
		addrs[i] = a
	}
	if len(missing) > 0 {
		// The handle is kept: a driver library does not like being
		// unloaded, and this happens once per process.
		return missingSymbols(missing)
	}
	for i, s := range symbols {
		purego.RegisterFunc(s.fn, addrs[i])
	}
	return nil
}
