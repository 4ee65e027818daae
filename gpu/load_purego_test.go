//go:build linux && (amd64 || arm64)

package gpu

import (
	"reflect"
	"testing"

	"github.com/ebitengine/purego"
)

// TestSignaturesRegister gives every bound signature to purego, which
// refuses (panics on) a type it cannot pass or a call with more stack
// arguments than it supports (cuLaunchKernel has 11). The functions are
// registered against a libc function and never called: this checks the
// Go side of each binding, not that it matches the driver's C
// prototype.
func TestSignaturesRegister(t *testing.T) {
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Skip("no libc.so.6:", err)
	}
	addr, err := purego.Dlsym(libc, "abs")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range symbols {
		fn := reflect.New(reflect.TypeOf(s.fn).Elem())
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: purego refuses %v: %v", s.name, fn.Elem().Type(), r)
				}
			}()
			purego.RegisterFunc(fn.Interface(), addr)
		}()
		if fn.Elem().IsNil() {
			t.Errorf("%s: not registered", s.name)
		}
	}
}

// TestSymbolNames: every bound variable appears once, under a distinct
// name.
func TestSymbolNames(t *testing.T) {
	names := map[string]bool{}
	vars := map[any]bool{}
	for _, s := range symbols {
		if names[s.name] || vars[s.fn] {
			t.Errorf("%s listed twice", s.name)
		}
		names[s.name], vars[s.fn] = true, true
	}
	if len(symbols) != 34 {
		t.Errorf("%d symbols, want the 34 the package uses", len(symbols))
	}
}
