// Command codec-bench measures tensorpress chains on tensors and encodes,
// decodes and inspects frame files.
//
//	codec-bench                       measure the default chains on a built-in synthetic tensor set
//	codec-bench run [flags]           the same, or on a raw file (--input, --dtype)
//	codec-bench encode --chain SPEC IN OUT
//	codec-bench decode IN OUT
//	codec-bench inspect FILE
//	codec-bench fl [flags]            compare gradient compressors by training on Fashion-MNIST
//	codec-bench stages
//	codec-bench profile validate|show|list
//	codec-bench link [flags]          plain TCP, static recipes, autotune and zstd on shaped links
//	codec-bench fed [flags]           a federation of processes: time to accuracy over shaped links
//	codec-bench hub [flags]           the model hub against one RPC per tensor, on loopback and a link
//	codec-bench gpu [flags]           the CUDA kernels against a device copy and the CPU
//
// Run 'codec-bench COMMAND -h' for the flags of each command. Exit status: 0
// on success, 1 when a command fails, 2 on a usage error.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	_ "github.com/tensorpress/tensorpress/gradient" // registers the gradient stages
	_ "github.com/tensorpress/tensorpress/stages"   // registers the standard stages
)

func main() {
	if ok, err := fedChild(); ok {
		// The hub or a client process of 'fed'.
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if ok, err := hubChild(); ok {
		// The server or the clients' process of 'codec-bench hub'.
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is one subcommand. do receives the arguments after its name.
type command struct {
	name, summary string
	do            func(args []string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"run", "measure chains on tensors (default: a built-in synthetic set)", cmdRun},
	{"encode", "encode a raw tensor or byte stream into frames", cmdEncode},
	{"decode", "decode frames back to raw tensor data or bytes", cmdDecode},
	{"inspect", "print the frames and segments of a frame file as JSON", cmdInspect},
	{"fl", "train a model in a simulated federation and compare gradient compressors", cmdFL},
	{"stages", "list the registered stages", cmdStages},
	{"profile", "validate, show and list profiles (YAML)", cmdProfile},
	{"link", "send a workload through simulated and tc-shaped links: plain TCP, static recipes, autotune, zstd", cmdLink},
	{"fed", "a federation of processes through the hub over simulated links: time to accuracy per way of moving the model", cmdFed},
	{"hub", "N clients fetch a model from the hub against one RPC per tensor: time, bytes, RPCs, server CPU and memory", cmdHub},
	{"gpu", "the CUDA kernels on the first GPU against a device copy, and a host gradient's frame against the CPU", cmdGPU},
}

// run is main without the process: it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	name := "run" // no command, or flags first: measure
	if len(args) > 0 {
		switch a := args[0]; {
		case a == "-h" || a == "-help" || a == "--help":
			usage(stderr)
			return 0
		case !strings.HasPrefix(a, "-"):
			name, args = a, args[1:]
		}
	}
	if name == "help" {
		if len(args) == 0 {
			usage(stderr)
			return 0
		}
		name, args = args[0], []string{"-h"}
	}
	for _, c := range commands {
		if c.name != name {
			continue
		}
		err := c.do(args, stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, new(usageError)):
			fmt.Fprintf(stderr, "codec-bench %s: %v\nRun 'codec-bench %s -h' for usage.\n", name, err, name)
			return 2
		}
		fmt.Fprintf(stderr, "codec-bench %s: %v\n", name, err)
		return 1
	}
	fmt.Fprintf(stderr, "codec-bench: unknown command %q\n\n", name)
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `codec-bench measures tensorpress compression chains and encodes, decodes and
inspects frame files.

Usage:
  codec-bench                          same as 'codec-bench run'
  codec-bench COMMAND [flags] [args]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-8s %s\n", "help", "show the help of a command")
	fmt.Fprint(w, `
Run 'codec-bench COMMAND -h' for the flags of a command.
`)
}

// usageError is a bad command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// flags is a subcommand's FlagSet with its help text. Parse errors are
// reported once, by run, with a pointer to -h; -h prints the help.
type flags struct {
	*flag.FlagSet
	synopsis, text string
	stderr         io.Writer
}

func newFlags(name, synopsis, text string, stderr io.Writer) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flags{FlagSet: fs, synopsis: synopsis, text: text, stderr: stderr}
}

func (f *flags) help() {
	fmt.Fprintf(f.stderr, "Usage: codec-bench %s\n\n%s\nFlags:\n", f.synopsis, f.text)
	f.SetOutput(f.stderr)
	f.PrintDefaults()
	f.SetOutput(io.Discard)
}

// parse parses flags placed before, between or after the positional
// arguments (flag.Parse alone stops at the first positional one) and
// checks the number of positional arguments. Everything after "--" is
// positional.
func (f *flags) parse(args []string, minPos, maxPos int) ([]string, error) {
	var pos []string
	for {
		if err := f.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				f.help()
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		rest := f.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if len(pos) < minPos || len(pos) > maxPos {
		want := fmt.Sprint(minPos)
		if maxPos != minPos {
			want = fmt.Sprintf("%d to %d", minPos, maxPos)
		}
		return nil, usagef("want %s argument(s), got %d %q", want, len(pos), pos)
	}
	return pos, nil
}

// isSet reports whether the flag called name was given.
func (f *flags) isSet(name string) bool {
	set := false
	f.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}

// writeJSONRows writes one JSON object per line to the file dst, or to
// stdout when dst is "-".
func writeJSONRows(dst string, stdout io.Writer, rows []any) (err error) {
	w := stdout
	if dst != "-" {
		f, err := os.Create(dst)
		if err != nil {
			return err
		}
		defer func() {
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}()
		w = f
	}
	enc := json.NewEncoder(w)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}
