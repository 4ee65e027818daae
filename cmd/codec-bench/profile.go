package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/tensorpress/tensorpress/profile"
)

const profileText = `profile checks and prints tensorpress profiles: YAML files that say which
recipes and gradient compressors may be used for which tensors, which must
stay lossless, the error budget, the decoder limits and the autotuner's
bounds (docs/PROFILES.md).

  codec-bench profile validate FILE...   check profiles; exit status 1 if one is invalid
  codec-bench profile show NAME|FILE     print a profile's effective settings as YAML
  codec-bench profile list               list the built-in profiles

An invalid profile is reported with the line and column of the value at
fault.
`

func cmdProfile(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("want a subcommand: validate, show or list")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "-h", "-help", "--help", "help":
		fmt.Fprintf(stderr, "Usage: codec-bench profile validate|show|list [args]\n\n%s", profileText)
		return flag.ErrHelp
	case "validate":
		return profileValidate(args, stdout, stderr)
	case "show":
		return profileShow(args, stdout, stderr)
	case "list":
		return profileList(args, stdout, stderr)
	}
	return usagef("unknown subcommand %q (want validate, show or list)", sub)
}

// profileErr drops the "profile: " that the profile package starts its
// errors with: the command line already says where the error is from.
func profileErr(err error) error {
	if msg, ok := strings.CutPrefix(err.Error(), "profile: "); ok {
		return errors.New(msg)
	}
	return err
}

func profileValidate(args []string, stdout, stderr io.Writer) error {
	f := newFlags("profile validate", "profile validate FILE...",
		"validate loads each profile and prints 'FILE: ok (N rules, M recipes)', counting\nthe default rule when the profile needs one; an invalid profile is reported with\nthe line and column of the value at fault, and the exit status is 1.\n", stderr)
	files, err := f.parse(args, 1, 1<<16)
	if err != nil {
		return err
	}
	bad := 0
	for _, name := range files {
		p, err := profile.LoadFile(name)
		if err != nil {
			if len(files) == 1 {
				return profileErr(err)
			}
			fmt.Fprintln(stderr, profileErr(err))
			bad++
			continue
		}
		fmt.Fprintf(stdout, "%s: ok (%d rules, %d recipes)\n", name, len(p.Rules), len(p.Recipes))
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d profiles invalid", bad, len(files))
	}
	return nil
}

func profileShow(args []string, stdout, stderr io.Writer) error {
	f := newFlags("profile show", "profile show NAME|FILE",
		"show prints the effective settings of a built-in profile (see 'profile list')\nor of a profile file as YAML, every default written out. A file of that name\ncomes before a built-in.\n", stderr)
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	p, err := loadProfile(pos[0])
	if err != nil {
		return err
	}
	b, err := p.Effective()
	if err != nil {
		return err
	}
	_, err = stdout.Write(b)
	return err
}

// loadProfile loads the file called arg, or else the built-in of that
// name.
func loadProfile(arg string) (*profile.Profile, error) {
	if _, err := os.Stat(arg); err == nil {
		p, err := profile.LoadFile(arg)
		if err != nil {
			return nil, profileErr(err)
		}
		return p, nil
	}
	for _, name := range profile.Builtins() {
		if name == arg {
			p, err := profile.Builtin(name)
			if err != nil {
				return nil, profileErr(err)
			}
			return p, nil
		}
	}
	return nil, fmt.Errorf("no profile file or built-in profile %q (built-ins: %s)", arg, strings.Join(profile.Builtins(), ", "))
}

func profileList(args []string, stdout, stderr io.Writer) error {
	f := newFlags("profile list", "profile list", "list prints the built-in profiles and what they are for.\n", stderr)
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDESCRIPTION")
	for _, name := range profile.Builtins() {
		p, err := profile.Builtin(name)
		if err != nil {
			return profileErr(err)
		}
		fmt.Fprintf(tw, "%s\t%s\n", name, p.Description)
	}
	return tw.Flush()
}
