package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// envAlias is a reference (llm-d) environment variable that sets a flag.
// seconds marks variables given in whole seconds for a duration flag.
type envAlias struct {
	name    string
	seconds bool
}

// referenceEnv maps flags to the llm-d reference servers' variables for the
// same setting, so a drop-in deployment keeps its configuration.
var referenceEnv = map[string][]envAlias{
	"retrain-interval":  {{"LATENCY_RETRAINING_INTERVAL_SEC", true}},
	"min-samples":       {{"LATENCY_MIN_SAMPLES_FOR_RETRAIN", false}},
	"min-samples-fresh": {{"LATENCY_MIN_SAMPLES_FOR_RETRAIN_FRESH", false}},
	"bucket-capacity":   {{"LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET", false}},
	"holdout-fraction":  {{"LATENCY_TEST_TRAIN_RATIO", false}},
	"holdout-capacity":  {{"LATENCY_MAX_TEST_DATA_SIZE", false}},
	"objective":         {{"LATENCY_OBJECTIVE_TYPE", false}},
	"quantile":          {{"LATENCY_QUANTILE_ALPHA", false}},
	"trainer-url":       {{"TRAINING_SERVER_URL", false}},
	"sync-interval":     {{"MODEL_SYNC_INTERVAL_SEC", true}},
}

// applyEnv sets every flag that was not given on the command line from
// HEADROOM_<FLAG> (upper case, dashes as underscores), or else from its
// reference alias. Command line beats HEADROOM_ beats reference names.
func applyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		name := envName(f.Name)
		if v, ok := lookup(name); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("environment %s=%q: %w", name, v, e)
			}
			return
		}
		for _, a := range referenceEnv[f.Name] {
			v, ok := lookup(a.name)
			if !ok {
				continue
			}
			if a.seconds {
				v = strings.TrimSpace(v) + "s"
			}
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("environment %s=%q: %w", a.name, v, e)
			}
			return
		}
	})
	return err
}

func envName(flagName string) string {
	return "HEADROOM_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}
