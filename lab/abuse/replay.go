package abuse

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/service"
)

// replay: whoever can answer for the trainer (a proxy, a stale load
// balancer, a restored backup, an attacker on the path) serves a predictor
// bundles that are genuine, signed with the deployment's key, but not
// current: the newest of the lineage the trainer left when its bundles were
// wiped (of a higher version than the one in service), an older version of
// the lineage in service, that older lineage restamped with a newer epoch
// (which cannot be signed again), and one made in the future. A predictor
// that took any of them served the older models, and deleted the newer
// lineage's copies, so that a restart did not bring it back (issue 26).
// The scenario runs its own trainers and predictor in this process, on
// loopback, in a temporary directory; the predictor syncs through a proxy
// the scenario controls. The figure: bundles not current taken, none
// allowed, before and after a restart of the predictor.
func replay(ctx context.Context, c Config) (*Result, error) {
	dir, err := os.MkdirTemp("", "headroom-replay-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	key := make([]byte, 32)
	rand.Read(key)

	// Lineage A, then the trainer's bundles are wiped and it starts lineage B.
	a, err := lineage(ctx, filepath.Join(dir, "a"), key, 2)
	if err != nil {
		return nil, err
	}
	b, err := lineage(ctx, filepath.Join(dir, "b"), key, 2)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c.Log, "replay: lineage %s v%d left, lineage %s v%d in service\n",
		a[1].Bundle.Epoch, a[1].Bundle.Version, b[1].Bundle.Epoch, b[1].Bundle.Version)

	var served atomic.Pointer[[]byte]
	served.Store(&b[1].Encoded)
	proxy, err := serveBundle(&served)
	if err != nil {
		return nil, err
	}
	defer proxy.Close()

	r := &Result{Scenario: "replay", Counts: map[string]int{}}
	pdir := filepath.Join(dir, "p")
	pred, err := startPredictor(pdir, "http://"+proxy.Addr().String(), key)
	if err != nil {
		return nil, err
	}
	if _, err := pred.Sync(ctx); err != nil {
		pred.Close()
		return nil, err
	}
	want := b[1].Bundle.Checksum
	if got := pred.ServingChecksum(); got != want {
		pred.Close()
		return nil, fmt.Errorf("replay: the predictor serves %q after syncing with lineage B, want %q", got, want)
	}

	restamped, err := restamp(a[1], key)
	if err != nil {
		pred.Close()
		return nil, err
	}
	future, err := madeAt(b[1], time.Now().Add(2*bundle.MaxClockSkew), key)
	if err != nil {
		pred.Close()
		return nil, err
	}
	taken := 0
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"the left lineage's newest (higher version)", a[1].Encoded},
		{"an older version of the lineage in service", b[0].Encoded},
		{"the left lineage restamped with a newer epoch", restamped},
		{"a bundle made in the future", future},
	} {
		served.Store(&tc.data)
		_, err := pred.Sync(ctx)
		in := pred.ServingChecksum()
		switch {
		case in != want:
			taken++
			r.Counts["taken: "+tc.name]++
		case err != nil:
			r.Counts["refused (unsigned): "+tc.name]++
		default:
			r.Counts["refused: "+tc.name]++
		}
	}
	pred.Close()
	// A restart serves what the predictor kept: the lineage in service.
	pred, err = startPredictor(pdir, "http://"+proxy.Addr().String(), key)
	if err != nil {
		return nil, err
	}
	if pred.ServingChecksum() != want {
		taken++
		r.Counts["taken after a restart"]++
	}
	pred.Close()
	r.atMost("bundles not current taken", float64(taken), "", 0)
	return r, nil
}

// lineage runs a trainer on a fresh directory and returns the n bundles it
// publishes, oldest first.
func lineage(ctx context.Context, dir string, key []byte, n int) ([]*bundle.Published, error) {
	cfg := service.DefaultConfig()
	cfg.DataDir, cfg.SigningKey, cfg.Manual = dir, key, true
	tc := service.DefaultTrainerConfig()
	tc.Listen, tc.XGBoost, tc.Nice = "127.0.0.1:0", nil, 0
	tc.Store.NoSync = true
	cfg.Trainer = &tc
	svc, err := service.New(cfg)
	if err != nil {
		return nil, err
	}
	defer svc.Close()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	defer func() { stop(); <-done }()
	var out []*bundle.Published
	for i := range n {
		if err := postGenerated(ctx, client(), svc.TrainerURL(), "", int64(i)*300, 300); err != nil {
			return nil, err
		}
		pub, err := svc.Retrain(ctx)
		if err != nil || pub == nil {
			return nil, fmt.Errorf("retrain: %v, %v", pub, err)
		}
		out = append(out, pub)
	}
	return out, nil
}

// restamp is pub's bundle with a newer epoch, which the attacker cannot
// sign with the deployment's key: it signs with one of its own.
func restamp(pub *bundle.Published, key []byte) ([]byte, error) {
	b, err := bundle.Decode(pub.Encoded, key)
	if err != nil {
		return nil, err
	}
	b.Epoch = bundle.NewEpoch(time.Now())
	return bundle.Encode(b, []byte("an-attackers-key-that-is-not-the-deployments"))
}

// madeAt is pub's bundle made at t, signed with key: what a trainer whose
// clock runs ahead publishes.
func madeAt(pub *bundle.Published, t time.Time, key []byte) ([]byte, error) {
	b, err := bundle.Decode(pub.Encoded, key)
	if err != nil {
		return nil, err
	}
	b.CreatedAt, b.Version = t, b.Version+1
	return bundle.Encode(b, key)
}

// serveBundle answers GET /model/bundle with the bytes served holds.
func serveBundle(served *atomic.Pointer[[]byte]) (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(*served.Load())
	})}
	go srv.Serve(ln)
	return ln, nil
}

// predictorProcess is a standalone predictor syncing only when told.
type predictorProcess struct {
	svc  *service.Service
	stop func()
}

func startPredictor(dir, trainerURL string, key []byte) (*predictorProcess, error) {
	cfg := service.DefaultConfig()
	cfg.DataDir, cfg.SigningKey, cfg.Manual = dir, key, true
	cfg.Logger = slog.New(slog.DiscardHandler)
	pc := service.DefaultPredictorConfig()
	pc.Listen, pc.TrainerURL, pc.SyncNice = "127.0.0.1:0", trainerURL, 0
	cfg.Predictor = &pc
	svc, err := service.New(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	return &predictorProcess{svc: svc, stop: func() { cancel(); <-done; svc.Close() }}, nil
}

func (p *predictorProcess) Sync(ctx context.Context) (bool, error) { return p.svc.Sync(ctx) }
func (p *predictorProcess) Close()                                 { p.stop() }

// ServingChecksum is the checksum of the bundle in service, "" for none.
func (p *predictorProcess) ServingChecksum() string {
	pub, _ := p.svc.Predictor().Current()
	if pub == nil {
		return ""
	}
	return pub.Bundle.Checksum
}
