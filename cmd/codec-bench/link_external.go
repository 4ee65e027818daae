package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// linkExternals are the zstd command-line tool's peers of the link
// command, piped over the same link: the name of each row and the
// compressor's arguments (the decompressor is "zstd -d -c").
func linkExternals(zstd string) []linkChain {
	return []linkChain{
		{name: "zstd -1 -T1", zstd: zstd, external: []string{"-1", "-T1", "-c"}},
		{name: "zstd --adapt -T1", zstd: zstd, external: []string{"--adapt", "-T1", "-c"}},
	}
}

// zstdRef is the external row the VS ZSTD -1 column compares with.
const zstdRef = "zstd -1 -T1"

// zstdPipe is a compressor writing into a connection and a decompressor
// reading from its other end, two zstd processes. Write feeds the
// compressor, Read returns the decompressor's output. The processes end
// with the context given to startZstdPipe; close reaps them.
type zstdPipe struct {
	comp, decomp     *exec.Cmd
	stdin            io.WriteCloser
	stdout           io.ReadCloser
	compErr, dcmpErr tailBuffer
	// waitComp and waitDecomp wait for each process once, and return
	// its error with the end of its stderr.
	waitComp, waitDecomp func() error
}

// startZstdPipe starts "zstd ARGS" writing into wire and "zstd -d -c"
// reading from link. On error nothing is left running.
func startZstdPipe(ctx context.Context, zstd string, args []string, wire io.Writer, link io.Reader) (*zstdPipe, error) {
	p := &zstdPipe{
		comp:   exec.CommandContext(ctx, zstd, args...),
		decomp: exec.CommandContext(ctx, zstd, "-d", "-c"),
	}
	// Output copies that outlive the processes (a reader that does not
	// read) end a while after the processes do.
	p.comp.WaitDelay, p.decomp.WaitDelay = 5*time.Second, 5*time.Second
	p.comp.Stdout, p.comp.Stderr = wire, &p.compErr
	p.decomp.Stdin, p.decomp.Stderr = link, &p.dcmpErr
	var err error
	if p.stdin, err = p.comp.StdinPipe(); err != nil {
		return nil, err
	}
	if p.stdout, err = p.decomp.StdoutPipe(); err != nil {
		p.stdin.Close()
		return nil, err
	}
	if err := p.comp.Start(); err != nil {
		p.stdin.Close()
		p.stdout.Close()
		return nil, fmt.Errorf("%s: %w", zstd, err)
	}
	if err := p.decomp.Start(); err != nil {
		p.stdin.Close()
		p.stdout.Close()
		p.comp.Process.Kill()
		p.comp.Wait()
		return nil, fmt.Errorf("%s: %w", zstd, err)
	}
	p.waitComp = waiter(p.comp, &p.compErr)
	p.waitDecomp = waiter(p.decomp, &p.dcmpErr)
	return p, nil
}

// waiter returns a function that waits for cmd once and returns its
// error, with the end of its stderr, every time.
func waiter(cmd *exec.Cmd, stderr *tailBuffer) func() error {
	return sync.OnceValue(func() error {
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(cmd.Args, " "), err, stderr.String())
		}
		return nil
	})
}

func (p *zstdPipe) Write(b []byte) (int, error) { return p.stdin.Write(b) }

func (p *zstdPipe) Read(b []byte) (int, error) { return p.stdout.Read(b) }

// finishCompressor closes the compressor's input and waits until its
// output is in the connection.
func (p *zstdPipe) finishCompressor() error {
	p.stdin.Close()
	return p.waitComp()
}

// close kills what still runs and reaps both processes. The context
// given to startZstdPipe must be done, or both processes finished.
func (p *zstdPipe) close() {
	p.stdin.Close()
	p.waitComp()
	p.waitDecomp()
}

// tailBuffer keeps the last 1000 bytes written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 1000 {
		t.b = append(t.b[:0], t.b[len(t.b)-1000:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
