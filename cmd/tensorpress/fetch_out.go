package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// fetchOut is where a fetch writes: one .safetensors file, or a directory
// of .npy files. Everything goes under temporary names beside the final
// ones (model.safetensors.part; dir/NAME.npy.part), each chunk at its
// place as it arrives, and is renamed to its final name only once every
// tensor is checked and synced; so a file under a final name is always
// complete. Every so often the files are synced and a record of how far
// the fetch got (the state: the version, the last chunk written, each
// tensor's place) is written beside them (model.safetensors.part.json;
// dir/.tensorpress-fetch.json), which a later run resumes from.
//
// A safetensors file is laid out as the tensors arrive: its header's
// room is kept first (sized from the version's tensor count: headerRoom),
// then each tensor's bytes after the previous one's, and the header is
// written into that room, padded with spaces, at the end (the data moved
// on in place, if it does not fit).
type fetchOut struct {
	path  string // --out
	npy   bool
	state string // the state's file
	st    outState
	index map[string]int // tensor name: its place in st.Tensors

	f      *os.File // safetensors: the .part file; npy: the .part of tensor fName
	lock   *os.File // locked while the fetch runs: the .part file, or the directory
	fName  string
	dataAt int64 // safetensors: where the data buffer starts (8 + Reserve)

	syncEvery int64 // bytes between two records of the state
	unsynced  int64 // bytes written since the last
	Written   int64 // bytes written by this run
}

// outState is the record a later run resumes from.
type outState struct {
	Version  uint64      `json:"version"`
	Base     uint64      `json:"base,omitempty"`
	Lossless bool        `json:"lossless"`
	Seq      uint64      `json:"seq"`               // chunks written and synced
	Reserve  int64       `json:"reserve,omitempty"` // safetensors: the header's room
	Tensors  []outTensor `json:"tensors"`           // in the order they came
	// Done: every chunk came; Digests (hex) are the hub's and Refetch
	// the tensors still to fetch whole.
	Done    bool              `json:"done,omitempty"`
	Digests map[string]string `json:"digests,omitempty"`
	Refetch []string          `json:"refetch,omitempty"`
}

type outTensor struct {
	Name  string      `json:"name"`
	DType codec.DType `json:"dtype"`
	Shape []int64     `json:"shape"`
	Begin int64       `json:"begin"` // safetensors: its offset in the data buffer
}

func (t *outTensor) size() int64 {
	return (&codec.Tensor{DType: t.DType, Shape: t.Shape}).NumBytes()
}

// outKey is what a fetch must share with the run it resumes.
type outKey struct {
	Version  uint64
	Base     uint64
	Lossless bool
}

// headerRoom is the room kept for the header of a safetensors file of n
// tensors: 256 bytes a tensor and 1 KiB more, the data then starting on a
// 4 KiB boundary.
func headerRoom(n int) int64 {
	return (8+1024+256*int64(n)+4095)&^4095 - 8
}

// openOut opens the output at path for the fetch k, resuming what an
// earlier run of the same fetch left (same version, base and
// lossless), else starting anew. tensors and total are the version's
// count and bytes.
func openOut(path string, npy bool, k outKey, tensors int, total int64) (*fetchOut, bool, error) {
	o := &fetchOut{path: path, npy: npy, state: path + ".part.json", syncEvery: min(64<<20, max(1<<20, total/32))}
	if npy {
		o.state = filepath.Join(path, ".tensorpress-fetch.json")
	}
	// One fetch at a time writes there: it holds a lock on the .part file
	// (on the directory for .npy files).
	lockPath := path + ".part"
	if npy {
		lockPath = path
	}
	lk, err := lockFile(lockPath, !npy)
	if err != nil {
		return nil, false, err
	}
	o.lock = lk
	if !npy {
		o.f = lk
	}
	if o.resume(k) {
		return o, true, nil
	}
	if err := o.clean(); err != nil {
		o.close()
		return nil, false, err
	}
	o.st = outState{Version: k.Version, Base: k.Base, Lossless: k.Lossless}
	o.index = map[string]int{}
	if !npy {
		o.st.Reserve = headerRoom(tensors)
		o.dataAt = 8 + o.st.Reserve
	}
	return o, false, nil
}

// resume reads the state an earlier run left and reports whether it is
// of the same fetch, with its files there.
func (o *fetchOut) resume(k outKey) bool {
	b, err := os.ReadFile(o.state)
	if err != nil {
		return false
	}
	var st outState
	if json.Unmarshal(b, &st) != nil || (outKey{st.Version, st.Base, st.Lossless}) != k {
		return false
	}
	if !o.here(&st) {
		return false
	}
	o.st, o.index = st, map[string]int{}
	for i, t := range st.Tensors {
		o.index[t.Name] = i
	}
	o.dataAt = 8 + st.Reserve
	return true
}

// here reports whether the files the state st describes are there: the
// .part of each tensor (or, once every chunk came, its final .npy: a run
// killed while renaming them); the safetensors .part file at least as
// long as the header's room, and the data once every chunk came. Bytes
// missing or wrong otherwise are found by the checks of the digests.
func (o *fetchOut) here(st *outState) bool {
	if o.npy {
		for _, t := range st.Tensors {
			if !fileExists(o.npyPart(t.Name)) && !(st.Done && fileExists(filepath.Join(o.path, t.Name+".npy"))) {
				return false
			}
		}
		return true
	}
	fi, err := o.f.Stat()
	if err != nil {
		return false
	}
	need := 8 + st.Reserve
	if st.Done {
		for _, t := range st.Tensors {
			need = max(need, 8+st.Reserve+t.Begin+t.size())
		}
	}
	return fi.Size() >= need
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// discard removes the state: the next run starts anew.
func (o *fetchOut) discard() { os.Remove(o.state) }

// clean removes what an earlier run left: the state and the .part files.
func (o *fetchOut) clean() error {
	os.Remove(o.state)
	if !o.npy {
		return o.f.Truncate(0)
	}
	ents, _ := os.ReadDir(o.path)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".npy.part") {
			os.Remove(filepath.Join(o.path, e.Name()))
		}
	}
	return nil
}

func (o *fetchOut) npyPart(name string) string { return filepath.Join(o.path, name+".npy.part") }

// write writes a chunk (or a whole tensor) at its place.
func (o *fetchOut) write(t *codec.Tensor) error {
	ot, err := o.place(t)
	if err != nil {
		return err
	}
	at := ot.Begin + o.dataAt
	if o.npy {
		if at, err = o.npyFile(ot); err != nil {
			return err
		}
	}
	if _, err := o.f.WriteAt(t.Data, at+t.Offset*int64(t.DType.Size())); err != nil {
		return err
	}
	o.unsynced += int64(len(t.Data))
	o.Written += int64(len(t.Data))
	return nil
}

// place returns the place of t's tensor, giving it one after the last if
// it has none (its first chunk).
func (o *fetchOut) place(t *codec.Tensor) (*outTensor, error) {
	if i, ok := o.index[t.Name]; ok {
		ot := &o.st.Tensors[i]
		if ot.DType != t.DType || !slices.Equal(ot.Shape, t.Shape) {
			return nil, fmt.Errorf("tensor %q is %v %v, an earlier chunk said %v %v", t.Name, t.DType, t.Shape, ot.DType, ot.Shape)
		}
		return ot, nil
	}
	if o.npy && (t.Name == "" || strings.ContainsAny(t.Name, `/\`+"\x00") || t.Name == "." || t.Name == "..") {
		return nil, fmt.Errorf("tensor name %q cannot be a file name", t.Name)
	}
	if !o.npy {
		// A tensor a safetensors file cannot hold: said now, not at the end.
		n := t.NumBytes()
		if _, err := tensorfile.AppendSafetensorsHeader(nil, []tensorfile.TensorInfo{{Name: t.Name, DType: t.DType, Shape: t.Shape, End: n}}, nil); err != nil {
			return nil, err
		}
	}
	var begin int64
	if n := len(o.st.Tensors); n > 0 {
		last := &o.st.Tensors[n-1]
		begin = last.Begin + last.size()
	}
	o.index[t.Name] = len(o.st.Tensors)
	o.st.Tensors = append(o.st.Tensors, outTensor{Name: t.Name, DType: t.DType, Shape: slices.Clone(t.Shape), Begin: begin})
	return &o.st.Tensors[len(o.st.Tensors)-1], nil
}

// npyFile makes o.f the .part file of tensor ot (created with its header
// if new) and returns where its data starts.
func (o *fetchOut) npyFile(ot *outTensor) (int64, error) {
	head, err := tensorfile.AppendNpyHeader(nil, ot.DType, ot.Shape, 1)
	if err != nil {
		return 0, fmt.Errorf("tensor %q: %w", ot.Name, err)
	}
	if o.f != nil && o.fName == ot.Name {
		return int64(len(head)), nil
	}
	if err := o.closeFile(); err != nil {
		return 0, err
	}
	f, err := os.OpenFile(o.npyPart(ot.Name), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, err
	}
	o.f, o.fName = f, ot.Name
	if _, err := f.WriteAt(head, 0); err != nil {
		return 0, err
	}
	return int64(len(head)), f.Truncate(int64(len(head)) + ot.size())
}

// closeFile syncs and closes the file open (npy: before the next).
func (o *fetchOut) closeFile() error {
	if o.f == nil {
		return nil
	}
	err := o.f.Sync()
	if o.f != o.lock {
		if cerr := o.f.Close(); err == nil {
			err = cerr
		}
	}
	o.f, o.fName = nil, ""
	return err
}

// checkpoint records that the chunks up to seq are written, once enough
// bytes have come since the last record: the files synced first.
func (o *fetchOut) checkpoint(seq uint64) error {
	if o.unsynced < o.syncEvery {
		return nil
	}
	o.st.Seq = seq
	return o.save()
}

// save syncs the files and writes the state (a temporary file, synced,
// renamed).
func (o *fetchOut) save() error {
	if o.f != nil {
		if err := o.f.Sync(); err != nil {
			return err
		}
	}
	o.unsynced = 0
	b, err := json.Marshal(&o.st)
	if err != nil {
		return err
	}
	return writeFileAtomic(o.state, b)
}

// writeFileAtomic writes b to path through a temporary file, synced and
// renamed, and syncs the directory.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, fs.ErrInvalid) {
		return err
	}
	return nil
}

// mainDone records that every chunk came, with the hub's digests, and
// which tensors are still to fetch whole: refetch, and those of names
// (written by an earlier run, not checked as they came) whose bytes do
// not match their digest.
func (o *fetchOut) mainDone(digests map[string][32]byte, unchecked, refetch []string) error {
	for _, name := range unchecked {
		ok, err := o.matches(name, digests[name])
		if err != nil {
			return err
		}
		if !ok {
			refetch = append(refetch, name)
		}
	}
	o.st.Done, o.st.Digests = true, map[string]string{}
	for name, d := range digests {
		o.st.Digests[name] = fmt.Sprintf("%x", d)
	}
	slices.Sort(refetch)
	o.st.Refetch = slices.Compact(refetch)
	return o.save()
}

// matches reports whether the written bytes of tensor name match d.
func (o *fetchOut) matches(name string, d [32]byte) (bool, error) {
	i, ok := o.index[name]
	if !ok {
		return false, nil
	}
	ot := &o.st.Tensors[i]
	var r io.ReaderAt = o.f
	at := o.dataAt + ot.Begin
	if o.npy {
		f, err := os.Open(o.npyPart(name))
		if err != nil {
			return false, nil
		}
		defer f.Close()
		head, err := tensorfile.AppendNpyHeader(nil, ot.DType, ot.Shape, 1)
		if err != nil {
			return false, err
		}
		r, at = f, int64(len(head))
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(r, at, ot.size())); err != nil {
		return false, err
	}
	return bytes.Equal(h.Sum(nil), d[:]), nil
}

// commit checks that every tensor of the digests has its place, writes
// the safetensors header, syncs, and renames the files to their final
// names; the state goes last.
func (o *fetchOut) commit() error {
	if len(o.st.Tensors) != len(o.st.Digests) {
		return fmt.Errorf("%d tensors written, the hub has %d", len(o.st.Tensors), len(o.st.Digests))
	}
	for _, t := range o.st.Tensors {
		if _, ok := o.st.Digests[t.Name]; !ok {
			return fmt.Errorf("tensor %q written, the hub has no digest of it", t.Name)
		}
	}
	if o.npy {
		return o.commitNpy()
	}
	if err := o.writeHeader(); err != nil {
		return err
	}
	if err := o.closeFile(); err != nil {
		return err
	}
	if err := os.Rename(o.path+".part", o.path); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(o.path)); err != nil {
		return err
	}
	return os.Remove(o.state)
}

// commitNpy renames each .part to its .npy (synced when closed); a file
// renamed by a run killed in between is there already.
func (o *fetchOut) commitNpy() error {
	if err := o.closeFile(); err != nil {
		return err
	}
	for _, t := range o.st.Tensors {
		final := filepath.Join(o.path, t.Name+".npy")
		if err := os.Rename(o.npyPart(t.Name), final); err != nil {
			if _, serr := os.Stat(final); !errors.Is(err, fs.ErrNotExist) || serr != nil {
				return err
			}
		}
	}
	if err := syncDir(o.path); err != nil {
		return err
	}
	return os.Remove(o.state)
}

// writeHeader writes the safetensors header into its room, moving the
// data on if it does not fit.
func (o *fetchOut) writeHeader() error {
	infos := make([]tensorfile.TensorInfo, len(o.st.Tensors))
	var total int64
	for i, t := range o.st.Tensors {
		infos[i] = tensorfile.TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape, Begin: t.Begin, End: t.Begin + t.size()}
		total = max(total, infos[i].End)
	}
	meta := map[string]string{versionKey: strconv.FormatUint(o.st.Version, 10)}
	head, err := tensorfile.AppendSafetensorsHeader(make([]byte, 8, 8+o.st.Reserve), infos, meta)
	if err != nil {
		return err
	}
	if n := int64(len(head) - 8); n > o.st.Reserve {
		room := (8+n+4095)&^4095 - 8
		if err := o.moveData(8+room, total); err != nil {
			return err
		}
		o.st.Reserve = room
	}
	for int64(len(head)-8) < o.st.Reserve {
		head = append(head, ' ')
	}
	binary.LittleEndian.PutUint64(head, uint64(o.st.Reserve))
	if _, err := o.f.WriteAt(head, 0); err != nil {
		return err
	}
	if err := o.f.Truncate(o.dataAt + total); err != nil {
		return err
	}
	return o.f.Sync()
}

// moveData moves the data buffer of total bytes on to start at at, from
// its end back, a block at a time. The state goes first: a run killed
// meanwhile starts anew.
func (o *fetchOut) moveData(at, total int64) error {
	if err := os.Remove(o.state); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	buf := make([]byte, 4<<20)
	for end := total; end > 0; {
		n := min(end, int64(len(buf)))
		b := buf[:n]
		if _, err := o.f.ReadAt(b, o.dataAt+end-n); err != nil {
			return err
		}
		if _, err := o.f.WriteAt(b, at+end-n); err != nil {
			return err
		}
		end -= n
	}
	o.dataAt = at
	return nil
}

// close closes the files open and releases the lock, leaving the .part
// files and the state for a later run.
func (o *fetchOut) close() {
	if o.f != nil && o.f != o.lock {
		o.f.Close()
	}
	o.f = nil
	if o.lock != nil {
		o.lock.Close()
		o.lock = nil
	}
}
