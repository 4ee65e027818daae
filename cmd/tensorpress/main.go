// Command tensorpress is the long-running side of tensorpress (codec-bench
// is the measuring tool):
//
//	tensorpress hub [flags]     serve model versions from a directory to many clients (gRPC)
//	tensorpress fetch [flags]   pull a model version from a hub to disk, or its delta against a local copy
//	tensorpress proxy [flags]   a gRPC sidecar on each side of a slow link, for any application
//
// Run 'tensorpress COMMAND -h' for the flags of each. Exit status: 0 on
// success, 1 when a command fails, 2 on a usage error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	_ "github.com/tensorpress/tensorpress/lossless" // the stages a hub may use
	_ "github.com/tensorpress/tensorpress/lossy"
)

type command struct {
	name, summary string
	do            func(args []string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"hub", "serve model versions from a directory to many clients over gRPC", cmdHub},
	{"fetch", "pull a model version from a hub to disk, or its delta against a local copy", cmdFetch},
	{"proxy", "a gRPC sidecar, one on each side of a slow link, compressing any application's calls", cmdProxy},
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// errUsage marks an error in the command line (exit status 2).
type errUsage struct{ msg string }

func (e errUsage) Error() string { return e.msg }

func usagef(format string, args ...any) error { return errUsage{fmt.Sprintf(format, args...)} }

// run is main without the process: it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.do(args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, new(errUsage)):
			fmt.Fprintf(stderr, "tensorpress %s: %v\nRun 'tensorpress %s -h' for usage.\n", c.name, err, c.name)
			return 2
		default:
			fmt.Fprintf(stderr, "tensorpress %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "tensorpress: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "tensorpress serves and fetches tensor models over gRPC, compressed (codec-bench measures).")
	fmt.Fprintln(w, "\nUsage: tensorpress COMMAND [flags]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-7s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'tensorpress COMMAND -h' for the flags of each.")
}

// newFlags returns a flag set for a command whose -h prints synopsis, text
// and the flags.
func newFlags(name, synopsis, text string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: tensorpress %s\n\n%s\n%s\nFlags:\n", synopsis, strings.TrimSpace(text)+"\n", strings.TrimSpace(configText)+"\n")
		fs.PrintDefaults()
	}
	fs.String("config", "", "YAML `file` of flag values (see above)")
	return fs
}

// parse parses args and refuses positional arguments.
func parse(fs *flag.FlagSet, args []string) error {
	// The flag package prints the whole usage on any error; a mistyped
	// flag gets one line instead (run prints it), -h the usage.
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage()
			return err
		}
		return usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if file := fs.Lookup("config").Value.String(); file != "" {
		if err := readConfig(fs, file); err != nil {
			return usagef("--config: %v", err)
		}
	}
	return nil
}
