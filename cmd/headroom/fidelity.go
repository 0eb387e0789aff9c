package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/headroomhq/headroom/lab/fidelity"
	"github.com/headroomhq/headroom/lab/sim"
)

func fidelityCommand() command {
	return command{
		name:    "fidelity",
		summary: "predict real vLLM runs from their model, GPU, engine arguments and workload, and compare with what was measured",
		run:     runFidelity,
	}
}

func runFidelity(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fidelity", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		asJSON     = fs.Bool("json", false, `print {"rows": [...], "summary": {...}} instead of a table`)
		gpu        = fs.String("gpu", "", "the GPU's data sheet in the runs' hardware/ directory (default: the one each run's path names)")
		coefPath   = fs.String("coefficients", "", "the step model's coefficients (a JSON file from headroom calibrate; default: the shipped ones)")
		cv         = fs.String("cv", "", "cross-validate instead: model (each model's runs predicted with coefficients fitted on the other models'), gpu, or run")
		blisDir    = fs.String("blis", "", "score BLIS's predictions instead: DIR/<run>.csv, its per-request traces (see --blis-inputs)")
		blisInputs = fs.String("blis-inputs", "", "write BLIS's inputs for the runs into DIR and print the commands that run it")
		quiet      = fs.Bool("quiet", false, "no progress lines (--cv)")
		engine     = fs.String("engine-args", "", "set these vLLM engine arguments on every run, over what it records, key=value,... ("+strings.Join(sim.EngineArgKeys, ", ")+"): what the runs would have measured so configured, against what they did")
	)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: headroom fidelity [--json] [--engine-args k=v,...] [--coefficients FILE | --cv model|gpu|run | --blis DIR | --blis-inputs DIR] RUN...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("give at least one run directory")
	}
	exclusive := 0
	for _, set := range []bool{*coefPath != "", *cv != "", *blisDir != "", *blisInputs != ""} {
		if set {
			exclusive++
		}
	}
	if exclusive > 1 {
		return errors.New("--coefficients, --cv, --blis and --blis-inputs are exclusive")
	}
	group, ok := map[string]func(*fidelity.Run) string{
		"":      nil,
		"model": func(r *fidelity.Run) string { return r.Spec.Model },
		"gpu":   func(r *fidelity.Run) string { return r.Spec.GPU.Name },
		"run":   func(r *fidelity.Run) string { return r.Name },
	}[*cv]
	if !ok {
		return fmt.Errorf("--cv %q: want model, gpu or run", *cv)
	}
	runs, err := loadRuns(fs.Args(), *gpu, *engine)
	if err != nil {
		return err
	}
	var rep fidelity.Report
	switch {
	case *blisInputs != "":
		cmds, err := fidelity.WriteBLISInputs(*blisInputs, runs)
		if err != nil {
			return err
		}
		for _, c := range cmds {
			fmt.Fprintln(stdout, c)
		}
		return nil
	case *blisDir != "":
		var rows []fidelity.Row
		for _, r := range runs {
			pred, err := fidelity.ReadBLISTrace(filepath.Join(*blisDir, r.Name+".csv"), r.Spec.Tool)
			if err != nil {
				return fmt.Errorf("run %s: %w", r.Name, err)
			}
			rs, err := fidelity.Compare(r.Name, pred, r.Measured)
			if err != nil {
				return err
			}
			rows = append(rows, rs...)
		}
		rep = fidelity.NewReport(rows)
	case *cv != "":
		opts := fidelity.FitOptions{}
		if !*quiet {
			opts.Progress = func(s string) { fmt.Fprintln(stderr, s) }
		}
		// Each fold starts from the physical prior, as the shipped fit did:
		// never from coefficients that saw the held-out runs.
		folds, err := fidelity.CrossValidate(ctx, runs, group, fidelity.Prior(), opts)
		if err != nil {
			return err
		}
		var rows []fidelity.Row
		for _, f := range folds {
			if !*quiet {
				fmt.Fprintf(stderr, "held out %s: %+v\n", f.Held, f.Coef)
			}
			rows = append(rows, f.Rows...)
		}
		rep = fidelity.NewReport(rows)
	default:
		coef := sim.DefaultCoefficients()
		if *coefPath != "" {
			if coef, err = sim.ReadCoefficients(*coefPath); err != nil {
				return err
			}
		}
		if rep, err = fidelity.Evaluate(ctx, runs, coef); err != nil {
			return err
		}
	}
	if *asJSON {
		return fidelity.WriteJSON(stdout, rep)
	}
	return fidelity.WriteTable(stdout, rep)
}
