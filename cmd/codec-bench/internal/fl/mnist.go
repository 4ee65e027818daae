package fl

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/gzip"
)

// DefaultDir is where Debian's dataset-fashion-mnist package installs the
// Fashion-MNIST files.
const DefaultDir = "/usr/share/datasets/fashion-mnist"

const (
	// ImageSize is the number of pixels of one image (28×28).
	ImageSize = 28 * 28
	// NumClasses is the number of labels (0..9).
	NumClasses = 10
)

// File names inside the dataset directory.
const (
	trainImages = "train-images-idx3-ubyte.gz"
	trainLabels = "train-labels-idx1-ubyte.gz"
	testImages  = "t10k-images-idx3-ubyte.gz"
	testLabels  = "t10k-labels-idx1-ubyte.gz"
)

// IDX magic numbers: two zero bytes, the element type (0x08 = unsigned
// byte) and the number of dimensions.
const (
	magicImages = 0x00000803
	magicLabels = 0x00000801
)

// maxIDXBytes bounds the payload an IDX header may announce, so a corrupt
// header cannot make the loader allocate gigabytes.
const maxIDXBytes = 1 << 30

// Dataset is a set of labelled images. Sample i is the row
// X[i*ImageSize:(i+1)*ImageSize] (pixels in [0, 1], row-major 28×28) with
// label Y[i] in 0..NumClasses-1.
type Dataset struct {
	X []float32
	Y []uint8
	N int
}

// Validate reports whether the sizes agree and every label is a class.
func (d *Dataset) Validate() error {
	if d == nil {
		return errors.New("fl: nil dataset")
	}
	if d.N < 0 || len(d.Y) != d.N || len(d.X) != d.N*ImageSize {
		return fmt.Errorf("fl: malformed dataset: N=%d with %d labels and %d pixels (want N and N×%d)",
			d.N, len(d.Y), len(d.X), ImageSize)
	}
	for i, y := range d.Y {
		if y >= NumClasses {
			return fmt.Errorf("fl: malformed dataset: label %d of sample %d is not in 0..%d", y, i, NumClasses-1)
		}
	}
	return nil
}

// Subset returns a new dataset holding copies of the samples idx, in that
// order (an index may repeat).
func (d *Dataset) Subset(idx []int) (*Dataset, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	s := &Dataset{X: make([]float32, len(idx)*ImageSize), Y: make([]uint8, len(idx)), N: len(idx)}
	for j, i := range idx {
		if i < 0 || i >= d.N {
			return nil, fmt.Errorf("fl: subset index %d out of range [0, %d)", i, d.N)
		}
		copy(s.X[j*ImageSize:(j+1)*ImageSize], d.X[i*ImageSize:(i+1)*ImageSize])
		s.Y[j] = d.Y[i]
	}
	return s, nil
}

// head returns the first n samples of d, sharing its memory.
func (d *Dataset) head(n int) *Dataset {
	return &Dataset{X: d.X[:n*ImageSize], Y: d.Y[:n], N: n}
}

// LoadFashionMNIST reads the Fashion-MNIST training (60000) and test
// (10000) sets from the gzip'd IDX files in dir (usually DefaultDir).
// Pixels are byte/255 as float32, exactly as
// img.astype(np.float32) / np.float32(255).
func LoadFashionMNIST(dir string) (train, test *Dataset, err error) {
	return LoadFashionMNISTHead(dir, 0, 0)
}

// LoadFashionMNISTHead is LoadFashionMNIST reading only the first
// trainN training and testN test samples (0: all): it stops
// decompressing there, for runs that use no more.
func LoadFashionMNISTHead(dir string, trainN, testN int) (train, test *Dataset, err error) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, nil, fmt.Errorf("fl: Fashion-MNIST directory %s not found (apt-get install dataset-fashion-mnist)", dir)
	}
	var testErr error
	done := make(chan struct{})
	go func() { // the two sets decompress in parallel
		defer close(done)
		test, testErr = loadIDX(filepath.Join(dir, testImages), filepath.Join(dir, testLabels), testN)
	}()
	train, err = loadIDX(filepath.Join(dir, trainImages), filepath.Join(dir, trainLabels), trainN)
	<-done
	if err == nil {
		err = testErr
	}
	if err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

// LoadIDX reads a dataset from an IDX image file (unsigned bytes, N×28×28)
// and an IDX label file (unsigned bytes, N labels in 0..9). Files whose
// name ends in ".gz" are gunzipped.
func LoadIDX(imagesPath, labelsPath string) (*Dataset, error) {
	return loadIDX(imagesPath, labelsPath, 0)
}

// loadIDX is LoadIDX of the first n samples (0: all).
func loadIDX(imagesPath, labelsPath string, n int) (*Dataset, error) {
	dims, pix, err := readIDXFile(imagesPath, magicImages, n)
	if err != nil {
		return nil, err
	}
	if dims[1] != 28 || dims[2] != 28 {
		return nil, fmt.Errorf("fl: %s: images are %d×%d, want 28×28", imagesPath, dims[1], dims[2])
	}
	ldims, labels, err := readIDXFile(labelsPath, magicLabels, n)
	if err != nil {
		return nil, err
	}
	if ldims[0] != dims[0] {
		return nil, fmt.Errorf("fl: %s has %d labels but %s has %d images", labelsPath, ldims[0], imagesPath, dims[0])
	}
	for i, y := range labels {
		if y >= NumClasses {
			return nil, fmt.Errorf("fl: %s: label %d of sample %d is not in 0..%d", labelsPath, y, i, NumClasses-1)
		}
	}
	return &Dataset{X: pixels(pix), Y: labels, N: dims[0]}, nil
}

// pixels converts bytes to float32 byte/255, correctly rounded like
// numpy's float32 division.
func pixels(b []byte) []float32 {
	var lut [256]float32
	for i := range lut {
		lut[i] = float32(i) / float32(255)
	}
	x := make([]float32, len(b))
	for i, v := range b {
		x[i] = lut[v]
	}
	return x
}

func readIDXFile(path string, magic uint32, n int) ([]int, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("fl: %s not found (apt-get install dataset-fashion-mnist)", path)
		}
		return nil, nil, fmt.Errorf("fl: %w", err)
	}
	defer f.Close()
	var r io.Reader = bufio.NewReaderSize(f, 1<<16)
	if filepath.Ext(path) == ".gz" {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, fmt.Errorf("fl: %s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	dims, data, err := readIDX(r, magic, n)
	if err != nil {
		return nil, nil, fmt.Errorf("fl: %s: %w", path, err)
	}
	return dims, data, nil
}

// readIDX parses an IDX stream of unsigned bytes with the given magic
// (which fixes the number of dimensions). The stream must end right after
// the data, unless head is positive and less than the first dimension:
// then only the first head items are read (and dims[0] is head).
func readIDX(r io.Reader, magic uint32, head int) (dims []int, data []byte, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, nil, fmt.Errorf("reading IDX magic: %w", noEOF(err))
	}
	if got := binary.BigEndian.Uint32(hdr[:]); got != magic {
		return nil, nil, fmt.Errorf("IDX magic %#08x, want %#08x (unsigned bytes, %d dimensions)", got, magic, magic&0xff)
	}
	nd := int(magic & 0xff)
	raw := make([]byte, 4*nd)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, nil, fmt.Errorf("reading IDX dimensions: %w", noEOF(err))
	}
	size := int64(1)
	dims = make([]int, nd)
	for i := range dims {
		d := binary.BigEndian.Uint32(raw[4*i:])
		if d == 0 || d > maxIDXBytes {
			return nil, nil, fmt.Errorf("IDX dimension %d is %d", i, d)
		}
		size *= int64(d)
		if size > maxIDXBytes {
			return nil, nil, fmt.Errorf("IDX data of more than %d bytes", maxIDXBytes)
		}
		dims[i] = int(d)
	}
	if head > 0 && head < dims[0] {
		size = size / int64(dims[0]) * int64(head)
		dims[0] = head
		data := make([]byte, size)
		if _, err := io.ReadFull(r, data); err != nil {
			return nil, nil, fmt.Errorf("reading IDX data: %w", noEOF(err))
		}
		return dims, data, nil
	}
	// Grow with the data rather than trusting the header for the whole
	// allocation up front; read one byte more to detect trailing data.
	var buf bytes.Buffer
	buf.Grow(int(min(size, 64<<20)) + bytes.MinRead)
	n, err := buf.ReadFrom(io.LimitReader(r, size+1))
	if err != nil {
		return nil, nil, fmt.Errorf("reading IDX data: %w", err)
	}
	switch {
	case n < size:
		return nil, nil, fmt.Errorf("IDX data truncated: %d of %d bytes", n, size)
	case n > size:
		return nil, nil, fmt.Errorf("trailing bytes after %d bytes of IDX data", size)
	}
	return dims, buf.Bytes(), nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
