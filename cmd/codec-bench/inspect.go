package main

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	"github.com/tensorpress/tensorpress/codec"
)

const inspectText = `Prints the frames of a tensorpress stream ('-': stdin) as JSON, without
decoding any payload: for each frame its offset in FILE, type, header,
payload and total lengths and whether it carries a payload CRC (4 bytes
after the payload, counted in total_len); for each tensor entry its
metadata, the steps applied (stage, ID, parameters as recipe text, the
index of the segment each step read and its length) and the stored
segments with the coder that made each ("" when stored as is) and their
offset and length in FILE. Headers are checked (CRC, limits) as a decoder
would; payload CRCs are not.
`

type inspectDoc struct {
	File   string     `json:"file"`
	Size   int64      `json:"size"` // bytes read
	Frames []frameDoc `json:"frames"`
	Error  string     `json:"error,omitempty"`
}

type frameDoc struct {
	Offset      int64      `json:"offset"`
	Type        string     `json:"type"`
	Version     int        `json:"version"`
	HeaderLen   int        `json:"header_len"`
	PayloadLen  int64      `json:"payload_len"`
	PayloadCRC  bool       `json:"payload_crc"`
	TotalLen    int64      `json:"total_len"`
	Entries     []entryDoc `json:"entries,omitempty"`
	Hello       *helloDoc  `json:"hello,omitempty"`
	End         *endDoc    `json:"end,omitempty"`
	ControlKind *uint64    `json:"control_kind,omitempty"`
	Extensions  []extDoc   `json:"extensions,omitempty"`
}

type entryDoc struct {
	Name        string    `json:"name"`
	DType       string    `json:"dtype"`
	Shape       []int64   `json:"shape"`
	ChunkOffset int64     `json:"chunk_offset"` // first element carried
	ChunkCount  int64     `json:"chunk_count"`  // elements carried
	RawLen      int64     `json:"raw_len"`      // decoded bytes
	Lossless    bool      `json:"lossless"`
	Tags        []tagDoc  `json:"tags"`
	Version     uint64    `json:"version,omitempty"`
	Base        uint64    `json:"base,omitempty"`
	Steps       []stepDoc `json:"steps"`
	Segments    []segDoc  `json:"segments"`
}

type tagDoc struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type stepDoc struct {
	Stage     string `json:"stage"`
	ID        uint32 `json:"id"`
	Params    string `json:"params"`     // the op as recipe text, e.g. "zstd(3)"
	ParamsHex string `json:"params_hex"` // the wire parameters
	Input     int    `json:"input"`      // index of the segment the step read
	RawLen    int    `json:"raw_len"`    // its length
}

type segDoc struct {
	Name   string `json:"name"`
	Elem   string `json:"elem"`
	Coder  string `json:"coder"`
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
}

type helloDoc struct {
	MinVersion uint8    `json:"min_version"`
	MaxVersion uint8    `json:"max_version"`
	Session    string   `json:"session"`
	Peer       string   `json:"peer"`
	Stages     []uint32 `json:"stages"`
	MaxFrame   uint64   `json:"max_frame"`
}

type endDoc struct {
	Frames uint64 `json:"frames"`
	Bytes  uint64 `json:"bytes"`
}

type extDoc struct {
	Key uint64 `json:"key"`
	Len int    `json:"len"`
}

func cmdInspect(args []string, stdout, stderr io.Writer) error {
	fl := newFlags("inspect", "inspect [flags] FILE", inspectText, stderr)
	lim := limitFlags(fl)
	pos, err := fl.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if err := checkLimits(lim); err != nil {
		return err
	}
	in, closeIn, err := openInput(pos[0])
	if err != nil {
		return err
	}
	defer closeIn()
	doc, err := inspect(in, *lim)
	doc.File = pos[0]
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if jerr := enc.Encode(doc); err == nil {
		err = jerr
	}
	return err
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r *bufio.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

func (c *countingReader) skip(n int64) error {
	for n > 0 {
		k, err := c.r.Discard(int(min(n, 1<<30)))
		c.n += int64(k)
		n -= int64(k)
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// inspect reads frame headers and skips payloads. On an error it returns
// what it read so far, with the error also in doc.Error.
func inspect(r io.Reader, lim codec.Limits) (*inspectDoc, error) {
	cr := &countingReader{r: bufio.NewReaderSize(r, 64<<10)}
	doc := &inspectDoc{Frames: []frameDoc{}}
	var buf []byte
	open := false // a hello promised an end frame, which has not come
	for {
		off := cr.n
		h, b, err := codec.ReadFrameHeader(cr, cr, lim, buf)
		buf = b
		if err == io.EOF && cr.n == off {
			if !open {
				doc.Size = cr.n
				return doc, nil
			}
			err = fmt.Errorf("%w: the stream ends without an end frame", io.ErrUnexpectedEOF)
		}
		if err == nil {
			if h.Type == codec.FrameHello || h.Type == codec.FrameEnd {
				open = h.Type == codec.FrameHello
			}
			doc.Frames = append(doc.Frames, frameOf(h, off))
			if err = cr.skip(h.FrameLen() - int64(h.HeaderLen)); err != nil {
				err = fmt.Errorf("payload: %w", err)
			}
		}
		if err != nil {
			doc.Size = cr.n
			err = fmt.Errorf("frame at offset %d: %w", off, err)
			doc.Error = err.Error()
			return doc, err
		}
	}
}

func frameOf(h *codec.FrameHeader, off int64) frameDoc {
	f := frameDoc{
		Offset: off, Type: h.Type.String(), Version: h.Version, HeaderLen: h.HeaderLen,
		PayloadLen: h.Payload, PayloadCRC: h.PayloadCRC, TotalLen: h.FrameLen(),
	}
	switch h.Type {
	case codec.FrameHello:
		f.Hello = &helloDoc{MinVersion: h.Hello.MinVersion, MaxVersion: h.Hello.MaxVersion,
			Session: hex.EncodeToString(h.Hello.Session[:]), Peer: h.Hello.Peer, Stages: []uint32{}, MaxFrame: h.Hello.MaxFrame}
		for _, id := range h.Hello.Stages {
			f.Hello.Stages = append(f.Hello.Stages, uint32(id))
		}
	case codec.FrameEnd:
		f.End = &endDoc{Frames: h.End.Frames, Bytes: h.End.Bytes}
	case codec.FrameControl:
		f.ControlKind = &h.Control
	}
	for _, x := range h.Ext {
		f.Extensions = append(f.Extensions, extDoc{Key: x.Key, Len: len(x.Value)})
	}
	at := off + int64(h.HeaderLen) // the payload: entries' segments in order
	for i := range h.Entries {
		var e entryDoc
		e, at = entryOf(&h.Entries[i], at)
		f.Entries = append(f.Entries, e)
	}
	return f
}

func entryOf(e *codec.EntryHeader, at int64) (entryDoc, int64) {
	t := &e.Tensor
	d := entryDoc{
		Name: t.Name, DType: t.DType.String(), Shape: append([]int64{}, t.Shape...),
		ChunkOffset: t.Offset, ChunkCount: e.Count, RawLen: e.RawLen, Lossless: t.Tags.Lossless,
		Tags: []tagDoc{}, Version: t.Version, Base: t.Base, Steps: []stepDoc{}, Segments: []segDoc{},
	}
	for _, tg := range t.Tags.Extra {
		d.Tags = append(d.Tags, tagDoc{tg.Key, tg.Value})
	}
	for _, s := range e.Steps {
		sd := stepDoc{ID: uint32(s.Stage), ParamsHex: hex.EncodeToString(s.Params), Input: s.Input, RawLen: s.RawLen}
		if op := s.Op(); op != nil {
			sd.Stage, sd.Params = op.Stage().Name, op.String()
		} else {
			sd.Stage = fmt.Sprintf("unknown(%d)", s.Stage)
		}
		d.Steps = append(d.Steps, sd)
	}
	coders := storedCoders(e)
	for i, s := range e.Stored {
		sd := segDoc{Name: s.Name, Elem: s.Elem.String(), Offset: at, Length: int64(s.Len)}
		if coders != nil {
			sd.Coder = coders[i]
		}
		d.Segments = append(d.Segments, sd)
		at += int64(s.Len)
	}
	return d, at
}

// storedCoders replays the entry's steps to find which coder made each
// stored segment ("" for one stored as it is). It returns nil if the
// replay does not match the header, which a header that parsed rules out.
func storedCoders(e *codec.EntryHeader) []string {
	type seg struct {
		info  codec.SegInfo
		coder string
	}
	segs := []seg{{info: codec.SegInfo{Name: "data", Elem: e.Tensor.DType, Len: int(e.RawLen)}}}
	for _, s := range e.Steps {
		if s.Input >= len(segs) {
			return nil
		}
		op := s.Op()
		if op == nil {
			return nil
		}
		in := segs[s.Input].info
		in.Len = s.RawLen
		outs, err := op.Outputs(in)
		if err != nil {
			return nil
		}
		repl := make([]seg, len(outs))
		for j, o := range outs {
			repl[j].info = o
			if op.Stage().Kind == codec.Coder {
				repl[j].coder = op.String()
			}
		}
		segs = append(segs[:s.Input], append(repl, segs[s.Input+1:]...)...)
	}
	if len(segs) != len(e.Stored) {
		return nil
	}
	coders := make([]string, len(segs))
	for i, s := range segs {
		if s.info.Name != e.Stored[i].Name {
			return nil
		}
		coders[i] = s.coder
	}
	return coders
}
