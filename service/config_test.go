package service

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/xgboost"
)

// testConfig is a valid configuration of the roles asked for, on free
// loopback ports, linear models only, in a fresh directory.
func testConfig(t testing.TB, withTrainer, withPredictor bool) Config {
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.ShutdownGrace = 5 * time.Second
	if withTrainer {
		tc := DefaultTrainerConfig()
		tc.Listen, tc.XGBoost, tc.Nice = "127.0.0.1:0", nil, 0
		tc.Store.NoSync = true
		cfg.Trainer = &tc
	}
	if withPredictor {
		pc := DefaultPredictorConfig()
		pc.Listen, pc.SyncNice = "127.0.0.1:0", 0
		if withTrainer {
			pc.TrainerURL = ""
		}
		cfg.Predictor = &pc
	}
	return cfg
}

func TestDefaultsAreValid(t *testing.T) {
	for _, tc := range []struct {
		name               string
		trainer, predictor bool
	}{{"trainer", true, false}, {"predictor", false, true}, {"both", true, true}} {
		cfg := DefaultConfig()
		if tc.trainer {
			tr := DefaultTrainerConfig()
			cfg.Trainer = &tr
		}
		if tc.predictor {
			p := DefaultPredictorConfig()
			if tc.trainer {
				p.TrainerURL = ""
			}
			cfg.Predictor = &p
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: defaults refused: %v", tc.name, err)
		}
	}
}

// Each setting a demanding operator could get wrong is refused, naming
// the setting: by Validate, before anything is opened.
func TestValidateRefuses(t *testing.T) {
	for _, tc := range []struct {
		name      string
		predictor string // "" none, "alone" standalone, "beside" with the trainer
		trainer   bool
		change    func(*Config)
		field     string // the FieldError's Field
		want      string // in its message
	}{
		{"no role", "", false, func(c *Config) {}, "Trainer", "nothing to run"},
		{"objective", "beside", true, func(c *Config) { c.Objective = "median" }, "Objective", `"median"`},
		{"quantile 0", "beside", true, func(c *Config) { c.Quantile = 0 }, "Quantile", "between 0 and 1"},
		{"quantile 1", "beside", true, func(c *Config) { c.Quantile = 1 }, "Quantile", "between 0 and 1"},
		{"quantile NaN", "beside", true, func(c *Config) { c.Quantile = math.NaN() }, "Quantile", "between 0 and 1"},
		{"short signing key", "beside", true, func(c *Config) { c.SigningKey = []byte("short") }, "SigningKey", "5 bytes"},
		{"body limit", "beside", true, func(c *Config) { c.Limits.MaxBodyBytes = 0 }, "Limits.MaxBodyBytes", "at least 1"},
		{"row limit", "beside", true, func(c *Config) { c.Limits.MaxRows = -1 }, "Limits.MaxRows", "at least 1"},
		{"pair candidate limit", "beside", true, func(c *Config) { c.Limits.MaxPairCandidates = 0 }, "Limits.MaxPairCandidates", "at least 1"},
		{"entry limit", "beside", true, func(c *Config) { c.Limits.MaxEntries = -1 }, "Limits.MaxEntries", "0 (default)"},
		{"shutdown grace", "beside", true, func(c *Config) { c.ShutdownGrace = 0 }, "ShutdownGrace", "positive"},
		{"trainer without data dir", "", true, func(c *Config) { c.DataDir = "" }, "DataDir", "empty"},
		{"trainer listen empty", "", true, func(c *Config) { c.Trainer.Listen = "" }, "Trainer.Listen", "empty"},
		{"trainer listen no port", "", true, func(c *Config) { c.Trainer.Listen = "127.0.0.1" }, "Trainer.Listen", "missing port"},
		{"trainer listen port range", "", true, func(c *Config) { c.Trainer.Listen = ":65536" }, "Trainer.Listen", "0 to 65535"},
		{"trainer listen negative port", "", true, func(c *Config) { c.Trainer.Listen = ":-1" }, "Trainer.Listen", "0 to 65535"},
		{"trainer listen port name", "", true, func(c *Config) { c.Trainer.Listen = ":http" }, "Trainer.Listen", "a number"},
		{"trainer listen bad host", "", true, func(c *Config) { c.Trainer.Listen = "a b:80" }, "Trainer.Listen", "neither an IP address nor a name"},
		{"retrain interval", "", true, func(c *Config) { c.Trainer.RetrainInterval = 0 }, "Trainer.RetrainInterval", "positive"},
		{"min samples", "", true, func(c *Config) { c.Trainer.MinSamples = 0 }, "Trainer.MinSamples", "at least 1"},
		{"min samples fresh", "", true, func(c *Config) { c.Trainer.MinSamplesFresh = -3 }, "Trainer.MinSamplesFresh", "at least 1"},
		{"max train rows 0", "", true, func(c *Config) { c.Trainer.MaxTrainRows = 0 }, "Trainer.MaxTrainRows", "positive cap"},
		{"bucket capacity", "", true, func(c *Config) { c.Trainer.Store.BucketCapacity = 0 }, "Trainer.Store.BucketCapacity", "at least 1"},
		{"holdout fraction 0", "", true, func(c *Config) { c.Trainer.Store.HoldoutFraction = 0 }, "Trainer.Store.HoldoutFraction", "between 0 and 1"},
		{"holdout fraction 1", "", true, func(c *Config) { c.Trainer.Store.HoldoutFraction = 1 }, "Trainer.Store.HoldoutFraction", "between 0 and 1"},
		{"holdout capacity", "", true, func(c *Config) { c.Trainer.Store.HoldoutCapacity = 0 }, "Trainer.Store.HoldoutCapacity", "at least 1"},
		{"concurrent ingest", "", true, func(c *Config) { c.Trainer.MaxConcurrentIngest = 0 }, "Trainer.MaxConcurrentIngest", "at least 1"},
		{"ingest bytes", "", true, func(c *Config) { c.Trainer.MaxIngestBytes = -5 }, "Trainer.MaxIngestBytes", "at least 1"},
		{"model kind", "", true, func(c *Config) { c.Trainer.Kind = "forest" }, "Trainer.Kind", `"forest"`},
		{"xgboost params", "", true, func(c *Config) { c.Trainer.Params.Eta = 0 }, "Trainer.Params", "eta"},
		{"trainer nice", "", true, func(c *Config) { c.Trainer.Nice = 20 }, "Trainer.Nice", "0 to 19"},
		{"xgboost timeout", "", true, func(c *Config) { c.Trainer.XGBoost = defaultCLI(); c.Trainer.XGBoost.Timeout = 0 }, "Trainer.XGBoost.Timeout", "positive"},
		{"xgboost nice", "", true, func(c *Config) { c.Trainer.XGBoost = defaultCLI(); c.Trainer.XGBoost.Nice = -1 }, "Trainer.XGBoost.Nice", "0 to 19"},
		{"idle grace", "", true, func(c *Config) { c.Trainer.XGBoost = defaultCLI(); c.Trainer.XGBoost.IdleGrace = 0 }, "Trainer.XGBoost.IdleGrace", "positive"},
		{"predictor listen", "alone", false, func(c *Config) { c.Predictor.Listen = "localhost:99999" }, "Predictor.Listen", "0 to 65535"},
		{"trainer URL scheme", "alone", false, func(c *Config) { c.Predictor.TrainerURL = "127.0.0.1:8000" }, "Predictor.TrainerURL", "http:// or https://"},
		{"trainer URL host", "alone", false, func(c *Config) { c.Predictor.TrainerURL = "http://" }, "Predictor.TrainerURL", "with a host"},
		{"trainer URL syntax", "alone", false, func(c *Config) { c.Predictor.TrainerURL = "http://a b" }, "Predictor.TrainerURL", "invalid character"},
		{"sync interval", "alone", false, func(c *Config) { c.Predictor.SyncInterval = -time.Second }, "Predictor.SyncInterval", "positive"},
		{"sync nice", "alone", false, func(c *Config) { c.Predictor.SyncNice = 20 }, "Predictor.SyncNice", "0 to 19"},
		{"trainer URL beside a trainer", "beside", true, func(c *Config) { c.Predictor.TrainerURL = "http://127.0.0.1:8000" }, "Predictor.TrainerURL", "in memory"},
		{"bundle file beside a trainer", "beside", true, func(c *Config) { c.Predictor.BundleFile = "b.json" }, "Predictor.BundleFile", "in memory"},
		// Issue 11, row 9, and the forms of one socket.
		{"same address", "beside", true, func(c *Config) { c.Trainer.Listen, c.Predictor.Listen = "127.0.0.1:8000", "127.0.0.1:8000" },
			"Predictor.Listen", `"127.0.0.1:8000" and Trainer.Listen "127.0.0.1:8000" are the same address`},
		{"empty host and 0.0.0.0", "beside", true, func(c *Config) { c.Trainer.Listen, c.Predictor.Listen = ":8000", "0.0.0.0:8000" },
			"Predictor.Listen", "the same socket"},
		{"wildcard and loopback", "beside", true, func(c *Config) { c.Trainer.Listen, c.Predictor.Listen = "[::]:8000", "127.0.0.1:8000" },
			"Predictor.Listen", "the same socket"},
		{"localhost and loopback", "beside", true, func(c *Config) { c.Trainer.Listen, c.Predictor.Listen = "127.0.0.1:8000", "LOCALHOST:8000" },
			"Predictor.Listen", "the same socket"},
		{"mapped and plain IPv4", "beside", true, func(c *Config) { c.Trainer.Listen, c.Predictor.Listen = "[::ffff:10.0.0.1]:8000", "10.0.0.1:8000" },
			"Predictor.Listen", "the same socket"},
		{"same name", "beside", true, func(c *Config) { c.Trainer.Listen, c.Predictor.Listen = "headroom.local:8000", "Headroom.Local.:8000" },
			"Predictor.Listen", "the same socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, tc.trainer, tc.predictor != "")
			tc.change(&cfg)
			err := cfg.Validate()
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate = %v, want a *FieldError", err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Problem, tc.want) {
				t.Errorf("Validate = %q (field %s), want field %s and %q", err, fe.Field, tc.field, tc.want)
			}
			if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 1 {
				t.Errorf("Validate found %d problems, want 1: %v", n, err)
			}
		})
	}
}

func defaultCLI() *xgboost.CLI { return DefaultTrainerConfig().XGBoost }

// Listeners that cannot share a socket clash; the rest do not.
func TestDistinctAddrs(t *testing.T) {
	for _, tc := range []struct {
		trainer, predictor string
		clash              bool
	}{
		{"127.0.0.1:8000", "127.0.0.1:8001", false},
		{"127.0.0.1:8000", "127.0.0.2:8000", false},
		{"127.0.0.1:8000", "[::1]:8000", false}, // two stacks, two sockets
		{"10.0.0.1:8000", "10.0.0.2:8000", false},
		{"a.example:8000", "b.example:8000", false},
		{"localhost:8000", "10.0.0.1:8000", false},
		{"127.0.0.1:0", "127.0.0.1:0", false}, // each gets a port of its own
		{":0", ":0", false},
		{"127.0.0.1:8000", "127.0.0.1:8000", true},
		{":8000", "0.0.0.0:8000", true},
		{":8000", "[::]:8000", true},
		{"0.0.0.0:8000", "10.1.2.3:8000", true},
		{"a.example:8000", "[::]:8000", true},
		{"localhost:8000", "127.0.0.1:8000", true},
		{"localhost:8000", "[::1]:8000", true},
		{"localhost:8000", "127.0.0.2:8000", true},
		{"[::ffff:127.0.0.1]:8000", "127.0.0.1:8000", true},
		{"127.0.0.1:08000", "127.0.0.1:8000", true},
	} {
		err := distinctAddrs("Trainer.Listen", tc.trainer, "Predictor.Listen", tc.predictor)
		if (err != nil) != tc.clash {
			t.Errorf("%s beside %s: clash %v, want %v", tc.trainer, tc.predictor, err, tc.clash)
		}
	}
}

// Every problem is reported at once, each a *FieldError.
func TestValidateReportsEveryProblem(t *testing.T) {
	cfg := testConfig(t, true, true)
	cfg.Quantile, cfg.Trainer.Nice, cfg.Predictor.Listen = 2, 99, cfg.Trainer.Listen
	cfg.Trainer.Listen = "127.0.0.1:8000"
	cfg.Predictor.Listen = "127.0.0.1:8000"
	err := cfg.Validate()
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a *FieldError", e)
		}
		fields = append(fields, fe.Field)
	}
	if got := strings.Join(fields, " "); got != "Quantile Trainer.Nice Predictor.Listen" {
		t.Errorf("problems with %s, want Quantile Trainer.Nice Predictor.Listen (%v)", got, err)
	}
}
