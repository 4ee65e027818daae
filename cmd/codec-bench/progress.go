package main

import (
	"golang.org/x/term"

	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progress reports on stderr how far a run has come, whatever stdout is
// (a terminal, a file or a pipe). When stderr is a terminal it shows a
// status line such as "[12/48 3s] weights  shuffle | *:huff0", rewritten
// in place with \r; otherwise (a log file, a test) it prints one line per
// tensor.
type progress struct {
	stderr      io.Writer
	term        bool
	start       time.Time
	done, total int
	width       int // length of the line on screen
}

func newProgress(stderr io.Writer) *progress {
	return &progress{stderr: stderr, term: isTerminal(stderr), start: time.Now()}
}

// tensor announces the next tensor; on a terminal the status lines of
// step say the same.
func (p *progress) tensor(i, n int, name, what string) {
	if !p.term {
		fmt.Fprintf(p.stderr, "codec-bench: [%d/%d tensors, %s] %s (%s)\n", i+1, n, p.elapsed(), name, what)
	}
}

// step announces the next unit of work.
func (p *progress) step(name, what string) {
	p.done++
	if !p.term {
		return
	}
	line := fmt.Sprintf("[%d/%d %s] %s  %s", p.done, p.total, p.elapsed(), name, what)
	fmt.Fprintf(p.stderr, "\r%s%s", line, strings.Repeat(" ", max(0, p.width-len(line))))
	p.width = len(line)
}

func (p *progress) elapsed() string { return time.Since(p.start).Round(time.Second).String() }

// clear erases the status line, before other output.
func (p *progress) clear() {
	if p.term && p.width > 0 {
		fmt.Fprintf(p.stderr, "\r%s\r", strings.Repeat(" ", p.width))
		p.width = 0
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
