package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/headroomhq/headroom/lab/fidelity"
	"github.com/headroomhq/headroom/lab/sim"
)

func calibrateCommand() command {
	return command{
		name:    "calibrate",
		summary: "fit the simulator's step model to real runs (the Roofline's coefficients) or to an llm-d trace (the linear cost model)",
		run:     runCalibrate,
	}
}

func runCalibrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("calibrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		tracePath = fs.String("trace", "", "fit the linear cost model to this llm-d trace (JSONL of training entries) instead")
		gpu       = fs.String("gpu", "", "the GPU's data sheet in the runs' hardware/ directory (default: the one each run's path names)")
		prior     = fs.String("prior", "shipped", "what the fit starts from and pulls back to: shipped (the coefficients fitted across the shared runs), physics (the hardware prior they were fitted from), or a JSON file of coefficients")
		quiet     = fs.Bool("quiet", false, "no progress lines")
	)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: headroom calibrate [--gpu NAME] [--prior shipped|physics|FILE] RUN... > coefficients.json")
		fmt.Fprintln(stderr, "       headroom calibrate --trace FILE > calibration.yaml")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tracePath != "" {
		if fs.NArg() > 0 {
			return errors.New("--trace fits the linear model to the trace alone: give no run directories")
		}
		fit, err := sim.FitCostModel(*tracePath)
		if err != nil {
			return err
		}
		m := fit.Model
		// whatif --config reads these keys.
		_, err = fmt.Fprintf(stdout, "# linear step cost fitted to %s (headroom calibrate --trace)\nstep_ms: %.4g\nprefill_token_ms: %.4g\nprefill_free_tokens: %d\ndecode_seq_ms: %.4g\ncontext_token_ms: %.4g\nfrontend_ms: %.4g\n",
			*tracePath, m.StepMs, m.PrefillTokenMs, m.PrefillFreeTokens, m.DecodeSeqMs, m.ContextTokenMs, m.FrontendMs)
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("give at least one run directory (or --trace FILE)")
	}
	runs, err := loadRuns(fs.Args(), *gpu, "")
	if err != nil {
		return err
	}
	var init sim.Coefficients
	switch *prior {
	case "shipped":
		init = sim.DefaultCoefficients()
	case "physics":
		init = fidelity.Prior()
	default:
		if init, err = sim.ReadCoefficients(*prior); err != nil {
			return err
		}
	}
	opts := fidelity.FitOptions{Prior: &init}
	if !*quiet {
		opts.Progress = func(s string) { fmt.Fprintln(stderr, s) }
	}
	coef, err := fidelity.Fit(ctx, runs, init, opts)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(coef, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", data)
	return err
}

// loadRuns reads run directories (docs/SIMULATOR.md, "Against real vLLM
// runs"), with the engine arguments of engineArgs (key=value,...) set on
// each over what it records.
func loadRuns(dirs []string, gpu, engineArgs string) ([]*fidelity.Run, error) {
	var runs []*fidelity.Run
	for _, dir := range dirs {
		r, err := fidelity.Load(dir, gpu)
		if err != nil {
			return nil, err
		}
		if r.Spec.Engine, err = sim.ParseEngineArgs(engineArgs, r.Spec.Engine); err != nil {
			return nil, fmt.Errorf("--engine-args: %w", err)
		}
		runs = append(runs, r)
	}
	return runs, nil
}
