package hub

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// A directory of versions holds one subdirectory per version, named by
// its number (1, 2, ...; other names, such as ".5.tmp" for a version
// still being written, are not versions). A version directory holds
// either one .safetensors file or .npy files (one tensor each, named by
// the file's base name), and no mix of them; other files are ignored.
// The hub's publisher, its watcher and the NATS publisher all read
// versions through these rules (VersionDir), so they agree on what
// version N holds.

// ErrLayout is returned for a version directory that breaks the rules:
// no tensor file, two .safetensors files, or both kinds.
var ErrLayout = errors.New("hub: not a version directory")

// Versions lists the version directories of dir, oldest first.
func Versions(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var vs []uint64
	for _, e := range ents {
		if v, err := strconv.ParseUint(e.Name(), 10, 64); err == nil && v > 0 && e.IsDir() {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs, nil
}

// VersionDir is a version directory whose files follow the rules: one
// .safetensors file (Safetensors), or .npy files (Npy, sorted).
type VersionDir struct {
	Path        string
	Safetensors string   // the .safetensors file's path, or ""
	Npy         []string // the .npy files' paths, sorted
}

// OpenVersion lists the version directory at path and checks its
// layout; it opens no file.
func OpenVersion(path string) (*VersionDir, error) {
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	vd := &VersionDir{Path: path}
	var st []string
	for _, e := range ents {
		switch name := e.Name(); {
		case e.IsDir():
		case strings.HasSuffix(name, ".safetensors"):
			st = append(st, filepath.Join(path, name))
		case strings.HasSuffix(name, ".npy"):
			vd.Npy = append(vd.Npy, filepath.Join(path, name))
		}
	}
	switch {
	case len(st) == 1 && len(vd.Npy) == 0:
		vd.Safetensors = st[0]
	case len(st) == 0 && len(vd.Npy) > 0:
	default:
		return nil, fmt.Errorf("%w: %s: want one .safetensors file or .npy files, found %d and %d", ErrLayout, path, len(st), len(vd.Npy))
	}
	return vd, nil
}

// npyName is the tensor name of a .npy file: its base name.
func npyName(path string) string { return strings.TrimSuffix(filepath.Base(path), ".npy") }

// Publish publishes the version's files into h as version v, without
// holding their tensors (PublishSafetensors, PublishNpy). The files stay
// open for the hub to read: close the Closer once h no longer keeps v.
// An error names the file it comes from.
func (vd *VersionDir) Publish(h *Hub, v uint64) (io.Closer, error) {
	if vd.Safetensors != "" {
		f, err := tensorfile.OpenSafetensorsFile(vd.Safetensors)
		if err != nil {
			return nil, err // it names the file
		}
		if err := h.PublishSafetensors(v, f.Safetensors); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", vd.Safetensors, err)
		}
		return f, nil
	}
	var cs closers
	files := make([]NpyFile, 0, len(vd.Npy))
	for _, path := range vd.Npy {
		f, err := os.Open(path)
		if err != nil {
			cs.Close()
			return nil, err
		}
		cs = append(cs, f)
		fi, err := f.Stat()
		if err != nil {
			cs.Close()
			return nil, err
		}
		files = append(files, NpyFile{Name: npyName(path), R: f, Size: fi.Size()})
	}
	if err := h.PublishNpy(v, files); err != nil {
		cs.Close()
		return nil, fmt.Errorf("%s: %w", vd.Path, err)
	}
	return cs, nil
}

// closers closes each of its files.
type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Tensors reads the version's tensors one at a time, whole, in the
// order of the files (a safetensors file's own order): for a consumer
// that takes them one by one, as the NATS publisher does. It stops at
// the first error, which names the file.
func (vd *VersionDir) Tensors() iter.Seq2[*codec.Tensor, error] {
	return func(yield func(*codec.Tensor, error) bool) {
		if vd.Safetensors != "" {
			f, err := tensorfile.OpenSafetensorsFile(vd.Safetensors)
			if err != nil {
				yield(nil, err)
				return
			}
			defer f.Close()
			for _, info := range f.Tensors() {
				t, err := f.Read(info.Name)
				if err != nil {
					err = fmt.Errorf("%s: %w", vd.Safetensors, err)
				}
				if !yield(t, err) || err != nil {
					return
				}
			}
			return
		}
		for _, path := range vd.Npy {
			t, err := readNpy(path)
			if !yield(t, err) || err != nil {
				return
			}
		}
	}
}

// readNpy reads the .npy file at path, named by its base name.
func readNpy(path string) (*codec.Tensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := tensorfile.ReadNpy(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t.Name = npyName(path)
	return t, nil
}
