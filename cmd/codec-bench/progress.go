package main

import (
	"golang.org/x/term"

	"fmt"
	"io"
	"os"
	"strings"
)

// progress shows a status line such as "[12/48] weights  shuffle | *:huff0"
// on stderr, rewritten in place with \r, when stdout is a terminal. When
// it is not (a file, a pipe, a test), it prints nothing.
type progress struct {
	stderr      io.Writer
	on          bool
	done, total int
	width       int // length of the line on screen
}

func newProgress(stdout, stderr io.Writer) *progress {
	return &progress{stderr: stderr, on: isTerminal(stdout)}
}

// step announces the next unit of work.
func (p *progress) step(name, what string) {
	p.done++
	if !p.on {
		return
	}
	line := fmt.Sprintf("[%d/%d] %s  %s", p.done, p.total, name, what)
	fmt.Fprintf(p.stderr, "\r%s%s", line, strings.Repeat(" ", max(0, p.width-len(line))))
	p.width = len(line)
}

// clear erases the status line, before other output.
func (p *progress) clear() {
	if p.on && p.width > 0 {
		fmt.Fprintf(p.stderr, "\r%s\r", strings.Repeat(" ", p.width))
		p.width = 0
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
