package tensorfile

import (
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
)

// jsonTokens walks a JSON document's tokens for the strict parsers of the
// safetensors header and the TF.js model JSON. encoding/json's
// Decoder.Token checks the syntax; the parsers check the structure, and
// catch the duplicate keys that decoding into a map would silently merge.
// Errors are FormatErrors of format at the document's offset in its file
// (base) plus the failing token's offset.
type jsonTokens struct {
	dec    *json.Decoder
	format string
	base   int64
	doc    string // the document in messages: "header JSON", "model JSON"
}

func (p *jsonTokens) fail(kind []error, msg string, args ...any) error {
	return formatErr(p.format, p.base+p.dec.InputOffset(), kind, msg, args...)
}

func (p *jsonTokens) corrupt(msg string, args ...any) error {
	return p.fail(isCorrupt, msg, args...)
}

// syntax turns a json error into a FormatError.
func (p *jsonTokens) syntax(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return p.corrupt("%s ends early", p.doc)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		// se.Offset counts from where the Decoder last resumed, not from
		// the start of the document; InputOffset is the failing token's.
		return p.corrupt("bad JSON in the %s: %v", p.doc, se)
	}
	return p.corrupt("bad JSON in the %s: %v", p.doc, err)
}

// next returns the next token.
func (p *jsonTokens) next() (json.Token, error) {
	tok, err := p.dec.Token()
	if err != nil {
		return nil, p.syntax(err)
	}
	return tok, nil
}

// delim reads the delimiter d, opening or closing what.
func (p *jsonTokens) delim(d json.Delim, what string) error {
	tok, err := p.next()
	if err != nil {
		return err
	}
	if tok != d {
		return p.corrupt("%s: want %v, got %s", what, d, describe(tok))
	}
	return nil
}

// key reads an object key (Token returns keys as strings).
func (p *jsonTokens) key(what string) (string, error) {
	tok, err := p.next()
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", p.corrupt("%s: want a key, got %s", what, describe(tok))
	}
	return s, nil
}

// uint reads a non-negative integer that fits an int64.
func (p *jsonTokens) uint(what string) (int64, error) {
	tok, err := p.next()
	if err != nil {
		return 0, err
	}
	num, ok := tok.(json.Number)
	if !ok {
		return 0, p.corrupt("%s: want a number, got %s", what, describe(tok))
	}
	s := num.String()
	if strings.HasPrefix(s, "-") {
		return 0, p.corrupt("%s: %s is negative", what, s)
	}
	if strings.ContainsAny(s, ".eE") {
		return 0, p.corrupt("%s: %s is not an integer", what, s)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, p.corrupt("%s: %s does not fit in 63 bits", what, s)
	}
	return v, nil
}
