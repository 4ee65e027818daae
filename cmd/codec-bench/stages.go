package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/tensorpress/tensorpress/codec"
)

const stagesText = `Lists the stages registered in this build, by permanent wire ID: name,
kind (filter, split, coder), granularity (where a tensor may be cut into
chunks), whether the stage is lossy, and what it does.
`

func cmdStages(args []string, stdout, stderr io.Writer) error {
	fl := newFlags("stages", "stages", stagesText, stderr)
	if _, err := fl.parse(args, 0, 0); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tKIND\tGRANULARITY\tLOSSY\tDOC")
	for _, s := range codec.Stages() {
		g := s.Granularity.String()
		if s.Granularity == codec.Block {
			g = fmt.Sprintf("block(%d)", s.Block)
		}
		lossy := "no"
		if s.Lossy {
			lossy = "yes"
		}
		fmt.Fprintf(tw, "%d\t%s\t%v\t%s\t%s\t%s\n", s.ID, s.Name, s.Kind, g, lossy, s.Doc)
	}
	return tw.Flush()
}
