package abuse

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/service"
)

// startService runs a trainer (linear models, retraining every 200 ms) and
// a predictor beside it, both on loopback ports of their own, until the
// test ends.
func startService(t *testing.T) Config {
	t.Helper()
	cfg := service.DefaultConfig()
	cfg.DataDir = t.TempDir()
	tc := service.DefaultTrainerConfig()
	tc.Listen, tc.XGBoost, tc.Nice, tc.RetrainInterval = "127.0.0.1:0", nil, 0, 200*time.Millisecond
	tc.Store.NoSync = true
	pc := service.DefaultPredictorConfig()
	pc.Listen, pc.TrainerURL = "127.0.0.1:0", ""
	cfg.Trainer, cfg.Predictor = &tc, &pc
	svc, err := service.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("service: %v", err)
		}
		svc.Close()
	})
	return Config{TrainerURL: svc.TrainerURL(), PredictorURL: svc.PredictorURL()}
}

// Every scenario runs, briefly and small, against a real service and
// reports its figures: the harness the documented figures come from is
// itself exercised on every test run.
func TestScenariosRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a service and sends load for several seconds")
	}
	c := startService(t)
	if err := Seed(context.Background(), c, 2000); err != nil {
		t.Fatal(err)
	}
	c.Clients, c.Duration, c.Rows, c.Candidates, c.ProbeRate, c.ReadRate = 4, time.Second, 200, 8, 20, 1<<20
	for _, s := range Scenarios {
		t.Run(s.Name, func(t *testing.T) {
			r, err := Run(context.Background(), s.Name, c)
			if err != nil {
				t.Fatal(err)
			}
			held := 0
			for _, f := range r.Figures {
				if f.Met != nil {
					held++
				}
			}
			if held == 0 {
				var b strings.Builder
				r.WriteText(&b)
				t.Errorf("no figure held to a target:\n%s", b.String())
			}
		})
	}
}

// Nothing goes beyond loopback.
func TestScenariosRefuseRemoteTargets(t *testing.T) {
	for _, s := range Scenarios {
		if s.Name == "replay" {
			continue // it runs its own trainers and predictor
		}
		_, err := Run(context.Background(), s.Name, Config{PredictorURL: "http://192.0.2.1:8001", TrainerURL: "http://192.0.2.1:8000", Duration: time.Second})
		if err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("%s against 192.0.2.1: %v, want a refusal naming loopback", s.Name, err)
		}
	}
	if err := Seed(context.Background(), Config{PredictorURL: "http://192.0.2.1:8001", TrainerURL: "http://192.0.2.1:8000"}, 1); err == nil {
		t.Error("Seed against 192.0.2.1 went ahead")
	}
}
