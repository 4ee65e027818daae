package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
)

// progress prints how a fetch goes on stderr: tensors, bytes, rate and
// time left, a line every interval (on a terminal, one line rewritten),
// and each broken stream with the pause before the next try.
type progress struct {
	w       io.Writer
	every   time.Duration // 0: no progress lines
	tty     bool
	tensors int
	total   int64
	done    int   // tensors complete
	bytes   int64 // bytes written, those an earlier run wrote included
	resumed int64 // bytes an earlier run wrote
	start   time.Time
	last    time.Time
	retries int
	inPlace bool // a line rewritten in place is on the terminal
}

func newProgress(w io.Writer, every time.Duration) *progress {
	p := &progress{w: w, every: every}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
			p.every = min(every, 500*time.Millisecond)
		}
	}
	return p
}

// begin starts the count for a version of n tensors and total bytes, out
// holding what an earlier run wrote.
func (p *progress) begin(n int, total int64, out *fetchOut) {
	p.tensors, p.total = n, total
	for i, t := range out.st.Tensors {
		if i < len(out.st.Tensors)-1 || out.st.Done {
			p.resumed += t.size()
			p.done++
		}
	}
	p.bytes = p.resumed
	p.start, p.last = time.Now(), time.Now()
	if p.resumed > 0 && p.every > 0 {
		fmt.Fprintf(p.w, "fetch: resuming: %d of %d tensors, %s written by an earlier run\n", p.done, n, sizeText(p.resumed))
	}
}

// add counts a chunk written.
func (p *progress) add(t *codec.Tensor) {
	p.bytes += int64(len(t.Data))
	if t.Offset*int64(t.DType.Size())+int64(len(t.Data)) == t.NumBytes() {
		p.done++
	}
}

// tick prints a line if the interval has passed.
func (p *progress) tick() {
	if p.every <= 0 || time.Since(p.last) < p.every {
		return
	}
	p.last = time.Now()
	p.line()
}

func (p *progress) line() {
	el := time.Since(p.start).Seconds()
	rate := float64(p.bytes-p.resumed) / max(el, 1e-3)
	eta := "?"
	if rate > 0 {
		eta = (time.Duration(float64(max(p.total-p.bytes, 0))/rate) * time.Second).Round(time.Second).String()
	}
	pct := 100.0
	if p.total > 0 {
		pct = 100 * float64(p.bytes) / float64(p.total)
	}
	text := fmt.Sprintf("fetch: %d/%d tensors, %s of %s (%.0f%%), %s/s, %s left",
		min(p.done, p.tensors), p.tensors, sizeText(p.bytes), sizeText(p.total), min(pct, 100), sizeText(int64(rate)), eta)
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\x1b[K", text)
		p.inPlace = true
		return
	}
	fmt.Fprintln(p.w, text)
}

// retry says that a stream broke, and when the next try is.
func (p *progress) retry(ri hub.RetryInfo) {
	p.retries++
	if p.inPlace {
		fmt.Fprintln(p.w)
		p.inPlace = false
	}
	where := ""
	if ri.Seq > 0 {
		where = fmt.Sprintf(" (after chunk %d)", ri.Seq)
	}
	fmt.Fprintf(p.w, "fetch: retry %d in %v%s: %v\n", ri.Attempt, ri.Wait.Round(time.Millisecond), where, ri.Err)
}

// end prints the last line.
func (p *progress) end() {
	if p.every > 0 {
		p.line()
		if p.inPlace {
			fmt.Fprintln(p.w)
		}
	}
}

// sizeText writes n bytes in KiB, MiB or GiB.
func sizeText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
