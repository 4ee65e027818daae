package gpu

import (
	"strings"
	"testing"
)

func TestPackArgs(t *testing.T) {
	vals, err := packArgs([]any{Ptr(0x7f112233), uintptr(9), int32(-2), uint32(3), int64(-4), uint64(5), float32(0.5), float64(-0.25)})
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{0x7f112233, 9, uint64(uint32(0xfffffffe)), 3, 0xfffffffffffffffc, 5, 0x3f000000, 0xbfd0000000000000}
	for i := range want {
		if vals[i] != want[i] {
			t.Errorf("slot %d = %#x, want %#x", i, vals[i], want[i])
		}
	}
	if v, err := packArgs(nil); err != nil || len(v) != 0 {
		t.Errorf("packArgs(nil) = %v, %v", v, err)
	}
	for _, bad := range []any{1, "s", []byte{1}, nil, int16(1), struct{}{}, new(int32)} {
		if _, err := packArgs([]any{uint32(1), bad}); err == nil || !strings.Contains(err.Error(), "argument 1") {
			t.Errorf("packArgs(%T): %v", bad, err)
		}
	}
}

// TestZeroValues: values not made by Open and its methods give errors,
// not hangs or panics.
func TestZeroValues(t *testing.T) {
	var d Device
	_, err := d.Alloc(1)
	if err == nil {
		t.Error("Alloc on a zero Device: no error")
	}
	if err := d.Close(); err == nil {
		t.Error("Close of a zero Device: no error")
	}
	if _, err := d.Alloc(0); err == nil {
		t.Error("Alloc(0) on a zero Device: no error")
	}
	for what, err := range map[string]error{
		"Stream.Synchronize": new(Stream).Synchronize(),
		"Event.Record":       new(Event).Record(nil),
		"Module.Function":    func() error { _, err := new(Module).Function("k"); return err }(),
		"Elapsed":            func() error { _, err := Elapsed(new(Event), new(Event)); return err }(),
		"Launch":             d.Launch(&Function{m: new(Module)}, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, nil),
	} {
		if err == nil {
			t.Errorf("%s of a zero value: no error", what)
		}
	}
}
