package main

import (
	"flag"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The trainer's flags are checked before anything starts: an xgboost
// niceness outside what setpriority takes is refused with the flag's name.
func TestTrainerFlagsXGBoostNice(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{nil, ""},
		{[]string{"--xgboost-nice", "0"}, ""},
		{[]string{"--xgboost-nice", "19"}, ""},
		{[]string{"--xgboost-nice", "20"}, "--xgboost-nice 20"},
		{[]string{"--xgboost-nice", "-1"}, "--xgboost-nice -1"},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		var c commonFlags
		var tf trainerFlags
		c.register(fs)
		tf.register(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		c.dataDir = t.TempDir()
		db, err := openStore(&c, &tf, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		_, err = newTrainer(&c, &tf, db, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
		db.Close()
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%v: newTrainer error %v, want %q", tt.args, err, tt.wantErr)
		}
		if tt.args == nil && tf.xgboostNice != 10 {
			t.Errorf("default --xgboost-nice %d, want 10", tf.xgboostNice)
		}
	}
}
