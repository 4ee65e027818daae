package codec

import (
	"errors"
	"testing"
	"time"
)

func TestFeedbackRoundTrip(t *testing.T) {
	f := Feedback{Frames: 3, WireBytes: 1 << 40, RawBytes: 5, Consumed: 4, DecodeTime: time.Hour}
	g, err := ParseFeedback(append(f.AppendBinary(nil), 1, 2, 3)) // later fields are skipped
	if err != nil || g != f {
		t.Fatalf("got %+v, %v; want %+v", g, err, f)
	}
	for _, bad := range [][]byte{nil, {1, 2, 3, 4}, {1, 2, 3, 4, 0x80}, {1, 2, 3, 4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}} {
		if _, err := ParseFeedback(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("ParseFeedback(%x) = %v, want ErrCorrupt", bad, err)
		}
	}
	if s := (Feedback{RawBytes: 1 << 20, DecodeTime: time.Second}).DecodeSpeed(); s != 1<<20 {
		t.Errorf("DecodeSpeed = %v", s)
	}
	if s := (Feedback{RawBytes: 1}).DecodeSpeed(); s != 0 {
		t.Errorf("DecodeSpeed without a decode time = %v, want 0", s)
	}
}

func FuzzParseFeedback(f *testing.F) {
	f.Add(Feedback{Frames: 1, WireBytes: 2, RawBytes: 3, Consumed: 4, DecodeTime: 5}.AppendBinary(nil))
	f.Add([]byte{0x80, 0x80})
	f.Fuzz(func(t *testing.T, p []byte) {
		fb, err := ParseFeedback(p)
		if err != nil {
			return
		}
		g, err := ParseFeedback(fb.AppendBinary(nil))
		if err != nil || g != fb {
			t.Fatalf("%+v does not survive a round trip: %+v, %v", fb, g, err)
		}
	})
}
