package tensorfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// TestAppendSafetensorsHeader lays tensors out in arrival order (not the
// reference order), pads the header with spaces beyond what it needs, and
// reads the file back; offsets that leave a hole are refused.
func TestAppendSafetensorsHeader(t *testing.T) {
	a := &codec.Tensor{Name: "b", DType: codec.F32, Shape: []int64{3}, Data: bytes.Repeat([]byte{1}, 12)}
	b := &codec.Tensor{Name: "a", DType: codec.U8, Shape: []int64{2, 2}, Data: []byte{5, 6, 7, 8}}
	infos := []TensorInfo{
		{Name: "a", DType: codec.U8, Shape: []int64{2, 2}, Begin: 12, End: 16},
		{Name: "b", DType: codec.F32, Shape: []int64{3}, Begin: 0, End: 12},
	}
	head, err := AppendSafetensorsHeader(make([]byte, 8), infos, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	if (len(head)-8)%8 != 0 {
		t.Fatalf("header of %d bytes", len(head)-8)
	}
	head = append(head, bytes.Repeat([]byte(" "), 4096-len(head))...)
	binary.LittleEndian.PutUint64(head, uint64(len(head)-8))
	file := append(append(head, a.Data...), b.Data...)
	st, err := OpenSafetensors(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []*codec.Tensor{a, b} {
		got, err := st.Read(want.Name)
		if err != nil || !bytes.Equal(got.Data, want.Data) || got.DType != want.DType {
			t.Fatalf("%q: %v", want.Name, err)
		}
	}
	if st.Metadata()["k"] != "v" {
		t.Errorf("metadata %v", st.Metadata())
	}
	infos[0].Begin, infos[0].End = 13, 17
	if _, err := AppendSafetensorsHeader(nil, infos, nil); !errors.Is(err, codec.ErrCorrupt) {
		t.Errorf("a hole: %v", err)
	}
	infos[0] = TensorInfo{Name: "a", DType: codec.Byte, Shape: []int64{4}, Begin: 12, End: 16}
	if _, err := AppendSafetensorsHeader(nil, infos, nil); err == nil {
		t.Error("a dtype safetensors has no name for")
	}
}
