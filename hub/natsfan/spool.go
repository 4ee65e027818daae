package natsfan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tensorpress/tensorpress/budget"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// spooler writes a version's object, as it is read, into a safetensors
// file of the relay's directory: each frame decoded on its own (its
// decoded bytes charged to the budget before it is decoded, released
// once written), its chunks appended to a data file, and at the end the
// safetensors header written and the data copied after it. What the relay
// holds in memory is one frame, whatever the version's size.
type spooler struct {
	dir    string
	budget *budget.Budget
	lim    codec.Limits
}

// spoolTensor is a tensor being spooled: where its bytes start in the
// data file and how many have come.
type spoolTensor struct {
	info tensorfile.TensorInfo
	got  int64
}

// spool reads the frames of r into the file dir/<v>.safetensors, which it
// returns opened. Nothing is left under that name if it fails.
func (s *spooler) spool(ctx context.Context, v uint64, r io.Reader) (*tensorfile.SafetensorsFile, error) {
	data, err := os.CreateTemp(s.dir, fmt.Sprintf("%d.data-*", v))
	if err != nil {
		return nil, err
	}
	defer func() { data.Close(); os.Remove(data.Name()) }()
	tensors, err := s.frames(ctx, r, data)
	if err != nil {
		return nil, err
	}
	// The object store checks the digest when the object is read to its
	// end: nothing is served before that.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, err
	}
	return s.assemble(v, tensors, data)
}

// frames decodes the frames of r one at a time into data, returning the
// tensors in the order they came.
func (s *spooler) frames(ctx context.Context, r io.Reader, data *os.File) ([]*spoolTensor, error) {
	rd, err := codec.NewReader(r, codec.WithLimits(s.lim))
	if err != nil {
		return nil, err
	}
	var (
		tensors []*spoolTensor
		byName  = map[string]*spoolTensor{}
		size    int64
		charge  *budget.Charge
		cerr    error
	)
	defer func() { charge.Release() }()
	for {
		f, err := rd.NextInto(func(h *codec.FrameHeader, i int) []byte {
			if i == 0 {
				n := h.Payload
				for _, e := range h.Entries {
					n += e.RawLen
				}
				charge.Release()
				charge, cerr = s.budget.Charge(ctx, n)
			}
			return nil
		})
		if err == io.EOF {
			return tensors, nil
		}
		if err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		for _, t := range f.Tensors {
			if size, err = s.put(t, byName, &tensors, data, size); err != nil {
				return nil, err
			}
		}
		charge.Release()
	}
}

// put appends chunk t to data (at size), checking it continues its tensor.
func (s *spooler) put(t *codec.Tensor, byName map[string]*spoolTensor, tensors *[]*spoolTensor, data *os.File, size int64) (int64, error) {
	esz := int64(t.DType.Size())
	st := byName[t.Name]
	if st == nil {
		if t.Offset != 0 {
			return 0, fmt.Errorf("tensor %q starts at element %d: %w", t.Name, t.Offset, codec.ErrCorrupt)
		}
		st = &spoolTensor{info: tensorfile.TensorInfo{Name: t.Name, DType: t.DType, Shape: slices.Clone(t.Shape),
			Begin: size, End: size + t.NumElements()*esz}}
		byName[t.Name] = st
		*tensors = append(*tensors, st)
	}
	if st.info.Begin+st.got != size || t.Offset*esz != st.got || st.got+int64(len(t.Data)) > st.info.Size() {
		return 0, fmt.Errorf("tensor %q: a chunk at element %d out of place: %w", t.Name, t.Offset, codec.ErrCorrupt)
	}
	if _, err := data.Write(t.Data); err != nil {
		return 0, err
	}
	st.got += int64(len(t.Data))
	return size + int64(len(t.Data)), nil
}

// assemble writes dir/<v>.safetensors: the header of tensors (in the
// order they came), then data, and opens it.
func (s *spooler) assemble(v uint64, tensors []*spoolTensor, data *os.File) (*tensorfile.SafetensorsFile, error) {
	infos := make([]tensorfile.TensorInfo, len(tensors))
	for i, st := range tensors {
		if st.got != st.info.Size() {
			return nil, fmt.Errorf("tensor %q: %d bytes of %d: %w", st.info.Name, st.got, st.info.Size(), codec.ErrCorrupt)
		}
		infos[i] = st.info
	}
	out, err := os.CreateTemp(s.dir, fmt.Sprintf("%d.safetensors-*", v))
	if err != nil {
		return nil, err
	}
	tmp := out.Name()
	defer os.Remove(tmp) // once renamed, nothing
	err = s.write(out, infos, data)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	final := filepath.Join(s.dir, fmt.Sprintf("%d.safetensors", v))
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		return nil, err
	}
	f, err := tensorfile.OpenSafetensorsFile(final)
	if err != nil {
		os.Remove(final)
	}
	return f, err
}

func (s *spooler) write(out *os.File, infos []tensorfile.TensorInfo, data *os.File) error {
	sw, err := tensorfile.NewSafetensorsWriter(out, infos, nil, tensorfile.WithKeepOrder(true))
	if err != nil {
		return err
	}
	for i, ti := range sw.Tensors() {
		if ti.Begin != infos[i].Begin || ti.End != infos[i].End {
			return fmt.Errorf("tensor %q laid out at [%d, %d), spooled at [%d, %d)", ti.Name, ti.Begin, ti.End, infos[i].Begin, infos[i].End)
		}
	}
	if _, err := data.Seek(0, io.SeekStart); err != nil {
		return err
	}
	// The data goes after the header as it is (file to file: the kernel
	// copies it); OpenSafetensorsFile checks the whole file after.
	if _, err := io.Copy(out, data); err != nil {
		return err
	}
	return out.Sync()
}

// spooled is a version served from a spool file.
type spooled struct {
	v uint64
	f *tensorfile.SafetensorsFile
}

// clean removes the spool files of versions the hub no longer keeps: the
// file at once (a fetch that still reads it keeps it open), the handle at
// the next cleaning. Leftovers of an earlier run (temporary files, files
// of versions not served) are removed too.
func (r *Relay) clean(keep func(uint64) bool) {
	for _, old := range r.closing {
		old.f.Close()
	}
	r.closing = r.closing[:0]
	var live []spooled
	for _, sp := range r.served {
		if keep(sp.v) {
			live = append(live, sp)
			continue
		}
		os.Remove(filepath.Join(r.dir, fmt.Sprintf("%d.safetensors", sp.v)))
		r.closing = append(r.closing, sp)
	}
	r.served = live
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		num, rest, _ := strings.Cut(name, ".")
		v := versionOf(num)
		ours := rest == "safetensors" || strings.HasPrefix(rest, "safetensors-") || strings.HasPrefix(rest, "data-")
		if v == 0 || !ours || rest == "safetensors" && slices.ContainsFunc(r.served, func(sp spooled) bool { return sp.v == v }) {
			continue
		}
		if !errors.Is(os.Remove(filepath.Join(r.dir, name)), os.ErrNotExist) {
			r.log.Debug("removed a spool file", "file", name)
		}
	}
}
