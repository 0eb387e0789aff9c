package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/headroomhq/headroom/lab/suite"
)

func suiteCommand() command {
	return command{
		name:    "suite",
		summary: "generate the simulated workload suite that `eval --suite` reports on",
		run:     runSuite,
	}
}

func runSuite(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("suite", flag.ContinueOnError)
	fs.SetOutput(stderr)
	manifest := fs.String("manifest", "", "regenerate the suite this manifest describes, checking every trace against its SHA-256 (default: the built-in suite)")
	refresh := fs.Bool("refresh", false, "with --manifest: accept traces that regenerate differently and write their new digests")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: headroom suite [--manifest FILE [--refresh]] DIR")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("want one output directory, got %d arguments", fs.NArg())
	}
	dir := fs.Arg(0)
	m := suite.Default()
	if *manifest != "" {
		var err error
		if m, err = suite.ReadManifest(*manifest); err != nil {
			return err
		}
	}
	if err := suite.Generate(ctx, m, dir, *manifest != "" && !*refresh); err != nil {
		return err
	}
	for i := range m.Traces {
		t := &m.Traces[i]
		fmt.Fprintf(stdout, "%-16s %-8s %5d rows  seed %-3d %s\n", t.Name, m.Part(t), t.Rows, t.Seed, filepath.Join(dir, t.File()))
	}
	fmt.Fprintf(stdout, "manifest %s\n", filepath.Join(dir, suite.ManifestName))
	return nil
}
