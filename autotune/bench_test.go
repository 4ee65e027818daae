package autotune

import (
	"syscall"
	"testing"
	"time"

	"github.com/tensorpress/tensorpress/codec"
)

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// paced is a link of the given rate in bytes per second: Write sleeps
// (using no CPU) as long as the bytes take to send.
type paced struct{ rate float64 }

func (p *paced) Write(b []byte) (int, error) {
	time.Sleep(time.Duration(float64(len(b)) / p.rate * float64(time.Second)))
	return len(b), nil
}

// BenchmarkTunerOverhead writes 16 MiB of float weights through a Writer
// (1 MiB frames, two encoders) to a 200 MB/s link, once with a Tuner
// (settled beforehand on plane coding, as on a live connection) and once
// with plane coding fixed. The CPU time per run of
// the two (cpu-ns/op) gives the cost of sniffing, profiling and exploring;
// explore-% is the Tuner's own count of the time it spent on samples, as a
// share of the encoding time.
func BenchmarkTunerOverhead(b *testing.B) {
	data := weights(4<<20, 42)
	planes := codec.MustParseRecipe(planes)
	run := func(b *testing.B, p codec.Policy, tu *Tuner) {
		w, err := codec.NewWriter(&paced{rate: 200e6}, codec.WithPolicy(p), codec.WithConcurrency(2))
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		write := func() {
			for off := 0; off < len(data); off += 1 << 20 {
				w.Write(data[off : off+1<<20])
			}
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		var work0, spent0 time.Duration
		if tu != nil {
			write() // settle: bootstrap and the first frames on raw
			work0, spent0 = tu.Costs()
		}
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		c0 := cpuTime()
		for b.Loop() {
			write()
		}
		b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		if tu != nil {
			work, spent := tu.Costs()
			b.ReportMetric(100*float64(spent-spent0)/float64(work-work0), "explore-%")
			if d, ok := tu.LastDecision(); !ok || d.To != planes.String() || tu.Switches() != 1 {
				b.Fatalf("the tuner did not settle on %s in one switch: %v; %d switches", planes, d, tu.Switches())
			}
		}
	}
	b.Run("fixed", func(b *testing.B) { run(b, codec.FixedPolicy{Recipe: planes}, nil) })
	b.Run("tuner", func(b *testing.B) {
		tu, err := New(WithCores(2))
		if err != nil {
			b.Fatal(err)
		}
		run(b, tu, tu)
	})
}
