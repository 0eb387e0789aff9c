package demo

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
)

// startTestService starts a service for one test; linearOnly skips the
// xgboost CLI, which these tests do not need.
func startTestService(t *testing.T, linearOnly bool) (*Service, *Client) {
	t.Helper()
	svc, err := StartService(ServiceOptions{Dir: t.TempDir(), NoXGBoost: linearOnly})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Close(); err != nil {
			t.Error(err)
		}
	})
	return svc, &Client{TrainerURL: svc.TrainerURL, PredictorURL: svc.PredictorURL}
}

func TestServiceRetrainPublishesToThePredictor(t *testing.T) {
	svc, client := startTestService(t, true)
	ctx := context.Background()
	if svc.XGBoostAvailable() {
		t.Error("xgboost reported available with NoXGBoost")
	}
	if ok, err := svc.Retrain(ctx); err != nil || ok {
		t.Fatalf("retrain without samples: new bundle %v, error %v", ok, err)
	}
	var entries []features.Sample
	for i := range 40 {
		row := features.Row{InputTokenLength: int64(100 + 10*i), NumRequestRunning: int64(i % 4)}
		entries = append(entries, features.Sample{Row: row, ActualTTFTMs: float64(50 + i)},
			features.Sample{Row: row, ActualTPOTMs: 20 + float64(i%7)})
	}
	if _, err := client.AddTrainingData(ctx, entries); err != nil {
		t.Fatal(err)
	}
	ok, err := svc.Retrain(ctx)
	if err != nil || !ok {
		t.Fatalf("retrain: new bundle %v, error %v", ok, err)
	}
	// The predictor serves it: it pulled the bundle over HTTP.
	p, err := client.Predict(ctx, []features.Row{{InputTokenLength: 300, NumTokensGenerated: 1}})
	if err != nil || len(p) != 1 || !(p[0].TTFTMs > 0) || !(p[0].TPOTMs > 0) {
		t.Fatalf("predict after retrain: %+v, %v", p, err)
	}
	if ok, err := svc.Retrain(ctx); err != nil || ok {
		t.Errorf("retrain with nothing new: new bundle %v, error %v", ok, err)
	}
}

func TestServiceCloseRemovesItsTempDir(t *testing.T) {
	svc, err := StartService(ServiceOptions{NoXGBoost: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := svc.tempDir
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("temp dir %s still there after Close: %v", dir, err)
	}
	if resp, err := http.Get(svc.TrainerURL + "/healthz"); err == nil {
		resp.Body.Close()
		t.Error("trainer still answers after Close")
	}
}

// The trainer reads the simulation's time: a bundle is made at the time
// the simulation set, whatever the wall clock says.
func TestServiceTrainerOnTheSimulationsClock(t *testing.T) {
	start := time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)
	svc, err := StartService(ServiceOptions{Dir: t.TempDir(), NoXGBoost: true, Start: start})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	client := svc.Client()
	ctx := context.Background()
	for i, at := range []time.Duration{90 * time.Second, 10 * time.Minute} {
		var entries []features.Sample
		for j := range 40 {
			row := features.Row{InputTokenLength: int64(100 + 10*j + i), NumRequestRunning: int64(j % 4)}
			entries = append(entries, features.Sample{Row: row, ActualTTFTMs: float64(50 + j), Timestamp: start.Add(at)},
				features.Sample{Row: row, ActualTPOTMs: 20 + float64(j%7), Timestamp: start.Add(at)})
		}
		svc.SetTime(start.Add(at))
		if _, err := client.AddTrainingData(ctx, entries); err != nil {
			t.Fatal(err)
		}
		if ok, err := svc.Retrain(ctx); err != nil || !ok {
			t.Fatalf("retrain at %v: new bundle %v, error %v", at, ok, err)
		}
		if got := svc.trainer.Trainer().Current().Bundle.CreatedAt; !got.Equal(start.Add(at)) {
			t.Errorf("bundle of the retrain at %v made at %v, want %v", at, got, start.Add(at))
		}
	}
}
