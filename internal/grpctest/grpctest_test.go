package grpctest

import (
	"bytes"
	"testing"
)

func TestRawCodec(t *testing.T) {
	var c RawCodec
	in := Message(1001)
	b, err := c.Marshal(&in)
	if err != nil || !bytes.Equal(b, in) {
		t.Fatalf("Marshal: %v", err)
	}
	var out []byte
	if err := c.Unmarshal(b, &out); err != nil || !bytes.Equal(out, in) {
		t.Fatalf("Unmarshal: %v", err)
	}
	if _, err := c.Marshal("x"); err == nil {
		t.Fatal("a string marshalled")
	}
	if err := c.Unmarshal(b, new(string)); err == nil {
		t.Fatal("unmarshalled into a string")
	}
	if !bytes.Equal(Message(64), Message(64)) || bytes.Equal(Message(64)[:32], Message(64)[32:]) {
		t.Fatal("Message is not deterministic or repeats")
	}
}
