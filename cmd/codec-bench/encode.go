package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tensorpress/tensorpress/codec"
)

const encodeText = `Encodes IN into a stream of tensorpress frames in OUT ('-': stdin, stdout),
every frame coded by the recipe --chain (the empty spec stores raw). With
--dtype, IN is one raw little-endian tensor of that dtype, shape [n], named
--name or after IN, written with Writer.WriteTensor; without it, IN is an
opaque byte stream written with Writer.Write. The stream opens with a hello
frame and ends with an end frame.

A lossy chain (fp16, int8, topk, ...) needs --dtype: a byte stream is
always coded losslessly, so it is refused rather than stored raw.
--lossless refuses lossy chains and tags the tensor lossless in its frames,
as a profile's require_lossless does.
`

func cmdEncode(args []string, stdout, stderr io.Writer) error {
	fl := newFlags("encode", "encode --chain SPEC [--dtype DTYPE] [--name NAME] [--chunk N] [--lossless] IN OUT", encodeText, stderr)
	spec := fl.String("chain", "", "recipe `spec` for every frame, such as 'shuffle4 | plane3:huff0 | plane0..2:raw' (required)")
	dtype := fl.String("dtype", "", "element type of IN (f32, bf16, i8, ...); without it IN is a byte stream")
	name := fl.String("name", "", "tensor name (default: IN's base name)")
	chunk := fl.Int("chunk", codec.DefaultChunkSize, "decoded `bytes` per frame")
	lossless := fl.Bool("lossless", false, "refuse a lossy chain, and tag the tensor lossless in its frames")
	pos, err := fl.parse(args, 2, 2)
	if err != nil {
		return err
	}
	if !fl.isSet("chain") {
		return usagef("--chain is required (use --chain '' to store raw)")
	}
	r, err := codec.ParseRecipe(*spec)
	if err != nil {
		return usagef("--chain: %v", err)
	}
	if lossy := lossyStages(r); len(lossy) > 0 {
		switch {
		case *lossless:
			return usagef("--lossless: --chain %q has lossy stages (%s)", r, strings.Join(lossy, ", "))
		case *dtype == "":
			return usagef("--chain %q has lossy stages (%s), which need the element type: give --dtype (a byte stream is only coded losslessly)", r, strings.Join(lossy, ", "))
		}
	}
	if *chunk < codec.MinChunkSize || *chunk > codec.MaxChunkSize {
		return usagef("--chunk %d outside [%d, %d]", *chunk, codec.MinChunkSize, codec.MaxChunkSize)
	}
	var t *codec.Tensor
	if *dtype != "" {
		dt, err := codec.ParseDType(*dtype)
		if err != nil {
			return usagef("--dtype: %v", err)
		}
		if dt == codec.Byte {
			return usagef("--dtype %s: leave --dtype out to encode a byte stream", *dtype)
		}
		t = &codec.Tensor{Name: *name, DType: dt, Tags: codec.Tags{Lossless: *lossless}}
		if !fl.isSet("name") {
			t.Name = filepath.Base(pos[0])
			if pos[0] == "-" {
				t.Name = "stdin"
			}
		}
	} else if fl.isSet("name") {
		return usagef("--name needs --dtype (byte streams have no name)")
	}

	return transform(pos[0], pos[1], stdout, func(in *os.File, out io.Writer) error {
		return encodeStream(in, out, t, r, *chunk)
	})
}

// lossyStages returns the names of the lossy stages of r, each once, in
// the order they first appear.
func lossyStages(r *codec.Recipe) []string {
	var names []string
	for _, st := range r.Steps {
		for _, op := range st.Ops {
			if s := op.Stage(); s.Lossy && !slices.Contains(names, s.Name) {
				names = append(names, s.Name)
			}
		}
	}
	return names
}

// encodeStream writes in to out as frames: one tensor t (its Data read
// from in), or a byte stream when t is nil.
func encodeStream(in *os.File, out io.Writer, t *codec.Tensor, r *codec.Recipe, chunk int) error {
	w, err := codec.NewWriter(out, codec.WithRecipe(r), codec.WithChunkSize(chunk))
	if err != nil {
		return err
	}
	if t != nil {
		if t.Data, err = readAll(in); err == nil {
			if len(t.Data)%t.DType.Size() != 0 {
				err = fmt.Errorf("%s: %d bytes is not a whole number of %d-byte %v elements", in.Name(), len(t.Data), t.DType.Size(), t.DType)
			} else {
				t.Shape = []int64{int64(len(t.Data) / t.DType.Size())}
				err = w.WriteTensor(t)
			}
		}
	} else {
		_, err = io.Copy(w, in)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}

const decodeText = `Decodes the tensorpress frames in IN and writes to OUT ('-': stdin, stdout)
the data they carry, in stream order: each tensor's raw little-endian bytes
and the content of byte-stream frames. Hello, control and end frames carry
no data. The chunks of a tensor must come in order and complete (a chunk on
its own, a gap or the end of the input inside a tensor is an error), and
input that is not tensorpress data is refused as such. The limit flags
bound what a frame may claim (0: the default).
`

func cmdDecode(args []string, stdout, stderr io.Writer) error {
	fl := newFlags("decode", "decode [flags] IN OUT", decodeText, stderr)
	lim := limitFlags(fl)
	pos, err := fl.parse(args, 2, 2)
	if err != nil {
		return err
	}
	if err := checkLimits(lim); err != nil {
		return err
	}
	return transform(pos[0], pos[1], stdout, func(in *os.File, out io.Writer) error {
		return decodeStream(in, out, *lim)
	})
}

func decodeStream(in io.Reader, out io.Writer, lim codec.Limits) error {
	rd, err := codec.NewReader(in, codec.WithLimits(lim))
	if err != nil {
		return err
	}
	for {
		f, err := rd.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		for _, t := range f.Tensors {
			if _, err := out.Write(t.Data); err != nil {
				return err
			}
		}
		if _, err := out.Write(f.Bytes); err != nil {
			return err
		}
	}
}

// openInput opens path, or stdin for "-".
func openInput(path string) (*os.File, func(), error) {
	if path == "-" {
		return os.Stdin, func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { f.Close() }, nil
}

// createOutput creates path (stdout for "-"). commit closes it and, when
// the command failed, removes the partial file; it returns the first error.
// It refuses to overwrite the input.
// transform runs fn from the input file (or stdin) to the output file (or
// stdout); the output file appears only when fn succeeds.
func transform(inPath, outPath string, stdout io.Writer, fn func(*os.File, io.Writer) error) error {
	in, closeIn, err := openInput(inPath)
	if err != nil {
		return err
	}
	defer closeIn()
	out, commit, err := createOutput(outPath, in, stdout)
	if err != nil {
		return err
	}
	return commit(fn(in, out))
}

func createOutput(path string, in *os.File, stdout io.Writer) (io.Writer, func(error) error, error) {
	if path == "-" {
		return stdout, func(err error) error { return err }, nil
	}
	if ost, err := os.Stat(path); err == nil {
		if ist, err := in.Stat(); err == nil && os.SameFile(ist, ost) {
			return nil, nil, fmt.Errorf("%s is also the input", path)
		}
	}
	// Write to a temporary file beside the output and rename it on success,
	// so a failed run leaves an existing output file as it was.
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, nil, err
	}
	return f, func(err error) error {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(f.Name(), path)
		}
		if err != nil {
			err = errors.Join(err, removeErr(os.Remove(f.Name())))
		}
		return err
	}, nil
}

func removeErr(err error) error {
	if err != nil {
		return fmt.Errorf("removing the partial output: %w", err)
	}
	return nil
}

// readAll reads f to the end into an 8-byte aligned buffer, which typed
// views of tensor data need. A regular file is read in place, without a
// second copy.
func readAll(f *os.File) ([]byte, error) {
	var b []byte
	var err error
	if st, serr := f.Stat(); serr == nil && st.Mode().IsRegular() {
		b = codec.AlignedBytes(int(st.Size()))
		if _, err = io.ReadFull(f, b); err == nil {
			if n, _ := f.Read(make([]byte, 1)); n > 0 {
				err = errors.New("the file grew while it was read")
			}
		}
	} else if b, err = io.ReadAll(f); err == nil {
		b = append(codec.AlignedBytes(len(b))[:0], b...)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return b, nil
}

// limitFlags adds the decoder limit flags shared by decode and inspect.
func limitFlags(fl *flags) *codec.Limits {
	lim := new(codec.Limits)
	fl.Int64Var(&lim.MaxFrameSize, "max-frame", 0, "largest stored payload of a frame in `bytes` (0: the default)")
	fl.Int64Var(&lim.MaxDecodedSize, "max-decoded", 0, "largest decoded size of a frame in `bytes` (0: the default)")
	fl.Int64Var(&lim.MaxSlowDecoded, "max-slow-decoded", 0, "largest size of a frame decoded through stages that decode at some MB/s (floatcm) in `bytes` (0: the default)")
	fl.Int64Var(&lim.MaxTensorSize, "max-tensor", 0, "largest tensor in `bytes` (0: the default)")
	return lim
}

func checkLimits(lim *codec.Limits) error {
	if lim.MaxFrameSize < 0 || lim.MaxDecodedSize < 0 || lim.MaxSlowDecoded < 0 || lim.MaxTensorSize < 0 {
		return usagef("limits must not be negative (0 means the default)")
	}
	return nil
}
