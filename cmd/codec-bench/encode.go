package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
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
	if _, err := codec.NewEncoder(codec.WithChunkSize(*chunk)); err != nil {
		return usagef("--chunk: %v", err)
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
no data. The limit flags bound what a frame may claim (0: the default).
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
	br := bufio.NewReaderSize(in, 64<<10)
	first, err := sniffStream(br)
	if err != nil {
		return err
	}
	rd := codec.NewReader(br, codec.WithLimits(lim))
	for n := 0; ; n++ {
		f, err := rd.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if n == 0 {
				return notStream(first, err)
			}
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

// Every frame opens with a lead byte whose bits 7-5 are the format version
// (docs/FORMAT.md), and a hello frame's header starts with the magic
// "TPRS".
const (
	leadVersionShift = 5
	leadTypeMask     = 7
	helloMagic       = "TPRS"
)

// errNotStream marks input that does not start with a tensorpress frame.
var errNotStream = errors.New("not a tensorpress stream")

// sniffStream looks at the first bytes of br without consuming them. It
// reports input that cannot be a tensorpress stream, because its first
// byte is not the lead byte of a frame of a known format version and it
// does not open with a hello frame (which a newer version would also
// send), as errNotStream; the codec would call it a frame of an unknown
// format version. It returns what it saw, for notStream.
func sniffStream(br *bufio.Reader) ([]byte, error) {
	b, _ := br.Peek(16)
	if len(b) == 0 || isHello(b) || b[0]>>leadVersionShift == codec.Version {
		return b, nil
	}
	return b, fmt.Errorf("%w: it starts with %s; a stream starts with a frame of format version %d or a hello frame (%q)",
		errNotStream, showBytes(b), codec.Version, helloMagic)
}

// isHello reports whether b starts with a hello frame: a lead byte of
// frame type 0, the header length (a uvarint), and the magic.
func isHello(b []byte) bool {
	if len(b) == 0 || codec.FrameType(b[0]&leadTypeMask) != codec.FrameHello {
		return false
	}
	_, n := binary.Uvarint(b[1:])
	return n > 0 && bytes.HasPrefix(b[1+n:], []byte(helloMagic))
}

// notStream explains a failure to read the first frame of input that does
// not open with a hello frame: most likely it is no tensorpress stream at
// all. Other errors, and input that opens with a hello frame, keep the
// codec's own error.
func notStream(first []byte, err error) error {
	if isHello(first) || !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, codec.ErrCorrupt) &&
		!errors.Is(err, codec.ErrChecksum) && !errors.Is(err, codec.ErrUnsupported) && !errors.Is(err, codec.ErrLimit) {
		return err
	}
	return fmt.Errorf("%w (it starts with %s, not with a hello frame, and its first frame does not read): %w", errNotStream, showBytes(first), err)
}

// showBytes prints up to 8 bytes as hex and, when they are text, quoted.
func showBytes(b []byte) string {
	b = b[:min(len(b), 8)]
	s := fmt.Sprintf("% x", b)
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return s
		}
	}
	return fmt.Sprintf("%s (%q)", s, b)
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
	fl.Int64Var(&lim.MaxTensorSize, "max-tensor", 0, "largest tensor in `bytes` (0: the default)")
	return lim
}

func checkLimits(lim *codec.Limits) error {
	if lim.MaxFrameSize < 0 || lim.MaxDecodedSize < 0 || lim.MaxTensorSize < 0 {
		return usagef("limits must not be negative (0 means the default)")
	}
	return nil
}
