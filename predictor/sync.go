package predictor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/headroomhq/headroom/internal/priority"
	"github.com/headroomhq/headroom/model"
)

// BundlePath is the trainer's route that serves the current bundle.
const BundlePath = "/model/bundle"

// maxBundleBytes bounds a downloaded bundle; a default-size bundle is a few
// hundred kilobytes.
const maxBundleBytes = 256 << 20

// Syncer keeps a Predictor up to date with a trainer's newest bundle.
type Syncer struct {
	TrainerURL string        // e.g. http://127.0.0.1:8000
	Interval   time.Duration // between polls (default 30 s)
	Client     *http.Client  // default: 10 s timeout
	SigningKey []byte        // when set, unsigned or wrongly signed bundles are refused
	AuthToken  string        // bearer token for the trainer's read routes, if any
	// SaveDir, when set, keeps the newest fetched bundle on disk so a
	// restarted predictor can serve before the trainer answers.
	SaveDir string
	// Nice is the scheduling niceness (1-19) a new bundle is read,
	// decoded, swapped in and saved at, on a thread of its own, so that
	// predictions served meanwhile come first; 0 leaves it at the
	// process's.
	Nice      int
	Predictor *Predictor
	Logger    *slog.Logger
	Metrics   *Metrics
}

// Run polls until ctx ends. The first poll is immediate.
func (s *Syncer) Run(ctx context.Context) {
	interval := s.Interval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	for {
		if _, err := s.SyncOnce(ctx); err != nil && ctx.Err() == nil {
			s.logger().Warn("bundle sync failed; serving the bundle in hand", "trainer", s.TrainerURL, "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// SyncOnce fetches the trainer's bundle if it changed and swaps it in. It
// returns whether a new bundle went into service.
func (s *Syncer) SyncOnce(ctx context.Context) (bool, error) {
	client := s.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(s.TrainerURL, "/")+BundlePath, nil)
	if err != nil {
		return false, fmt.Errorf("sync bundle: %w", err)
	}
	if cur, _ := s.Predictor.Current(); cur != nil {
		req.Header.Set("If-None-Match", cur.ETag())
	}
	if s.AuthToken != "" {
		req.Header.Set("Authorization", "Bearer "+s.AuthToken)
	}
	resp, err := client.Do(req)
	if err != nil {
		s.Metrics.syncResult("unreachable")
		return false, fmt.Errorf("sync bundle from %s: %w", s.TrainerURL, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotModified:
		s.Metrics.syncResult("not_modified")
		return false, nil
	case http.StatusNotFound:
		s.Metrics.syncResult("no_bundle")
		return false, nil // the trainer has not published yet
	case http.StatusOK:
	default:
		s.Metrics.syncResult("http_error")
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return false, fmt.Errorf("sync bundle from %s: status %d: %s", s.TrainerURL, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	var (
		swapped bool
		loadErr error
	)
	priority.RunNiced(s.Nice, func() { swapped, loadErr = s.load(resp.Body) })
	return swapped, loadErr
}

// load reads a bundle from body, swaps it in and keeps a copy in SaveDir.
func (s *Syncer) load(body io.Reader) (bool, error) {
	data, err := io.ReadAll(io.LimitReader(body, maxBundleBytes+1))
	if err != nil {
		s.Metrics.syncResult("unreachable")
		return false, fmt.Errorf("sync bundle from %s: read: %w", s.TrainerURL, err)
	}
	if len(data) > maxBundleBytes {
		s.Metrics.syncResult("refused")
		return false, fmt.Errorf("sync bundle from %s: larger than %d bytes", s.TrainerURL, maxBundleBytes)
	}
	b, err := model.Decode(data, s.SigningKey)
	if err != nil {
		s.Metrics.syncResult("refused")
		return false, fmt.Errorf("sync bundle from %s: refused: %w", s.TrainerURL, err)
	}
	pub := &model.Published{Bundle: b, Encoded: data}
	swapped := s.Predictor.Swap(pub, time.Now().UTC())
	s.Metrics.syncResult("ok")
	if swapped {
		s.Metrics.observeBundle(pub)
		s.logger().Info("serving new bundle", "version", b.Version, "checksum", b.Checksum[:12])
		if s.SaveDir != "" {
			if _, err := model.WriteBundle(s.SaveDir, b.Version, data); err != nil {
				s.logger().Warn("could not keep a local copy of the bundle", "error", err)
			} else if err := model.PruneBundles(s.SaveDir, 2); err != nil {
				s.logger().Warn("pruning local bundles failed", "error", err)
			}
		}
	}
	return swapped, nil
}

func (s *Syncer) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// LoadFile puts a bundle file in service, for a predictor that must answer
// before the trainer does.
func LoadFile(p *Predictor, path string, key []byte) (*model.Published, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load bundle %s: %w", path, err)
	}
	b, err := model.Decode(data, key)
	if err != nil {
		return nil, fmt.Errorf("load bundle %s: %w", path, err)
	}
	pub := &model.Published{Bundle: b, Encoded: data}
	p.Swap(pub, time.Now().UTC())
	return pub, nil
}

// LoadDir puts the newest valid bundle of dir in service, if there is one.
func LoadDir(p *Predictor, dir string, key []byte) (*model.Published, error) {
	pub, err := model.LoadNewestBundle(dir, key, nil)
	if err != nil || pub == nil {
		return nil, err
	}
	p.Swap(pub, time.Now().UTC())
	return pub, nil
}
