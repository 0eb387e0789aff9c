package predictor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/internal/priority"
	"github.com/headroomhq/headroom/model"
)

// BundlePath is the trainer's route that serves the current bundle.
const BundlePath = "/model/bundle"

// maxBundleBytes bounds a downloaded bundle; a default-size bundle is a few
// hundred kilobytes.
const maxBundleBytes = 256 << 20

// Syncer keeps a Predictor up to date with a trainer's newest bundle. It
// holds a long poll open on the trainer (GET /model/bundle?wait=), which
// the trainer answers the moment it publishes a new bundle, and polls every
// Interval besides, in case the long poll is lost (a proxy that cuts long
// requests, a trainer of an older release).
type Syncer struct {
	TrainerURL string        // e.g. http://127.0.0.1:8000
	Interval   time.Duration // between polls (default 30 s), jittered by ±20%
	// Watch is how long the trainer may hold each long poll (default 30 s,
	// jittered down by up to 20%); negative turns the long poll off.
	Watch      time.Duration
	Client     *http.Client // default: 10 s timeout; long polls use its transport without the timeout
	SigningKey []byte       // when set, unsigned or wrongly signed bundles are refused
	AuthToken  string       // bearer token for the trainer's read routes, if any
	// SaveDir, when set, keeps the newest fetched bundle on disk so a
	// restarted predictor can serve before the trainer answers.
	SaveDir string
	// Nice is the scheduling niceness (1-19) a new bundle is read,
	// decoded, swapped in and saved at, on a thread of its own, so that
	// predictions served meanwhile come first; 0 leaves it at the
	// process's. A bundle that would be the first to serve loads at the
	// process's priority: until it is in, every prediction is a 503.
	Nice      int
	Predictor *Predictor
	Logger    *slog.Logger
	Metrics   *Metrics

	loadMu sync.Mutex // one bundle loaded (and saved) at a time: poll and long poll
}

// Run polls until ctx ends, and holds a long poll open beside. The first
// poll is immediate; the long poll starts once it is done, so that a start
// does not download the bundle twice.
func (s *Syncer) Run(ctx context.Context) {
	interval := s.Interval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	var watching sync.WaitGroup
	defer watching.Wait()
	for first := true; ; first = false {
		if _, err := s.SyncOnce(ctx); err != nil && ctx.Err() == nil {
			s.logger().Warn("bundle sync failed; serving the bundle in hand", "trainer", s.trainer(), "error", err)
		}
		if first && s.Watch >= 0 {
			watching.Go(func() { s.watch(ctx, interval) })
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(jitter(interval, 0.2)):
		}
	}
}

// Long-poll backoff. After a failure (a trainer not started yet, or
// restarting) the next long poll waits errorBackoffMin, doubling up to
// errorBackoffMax: a trainer that comes up is watched within a second, and
// a refused connection costs nothing. After an answer that came at once and
// brought nothing new (a trainer that does not hold requests) it waits
// quietBackoffMin, doubling up to the poll interval.
const (
	errorBackoffMin = 100 * time.Millisecond
	errorBackoffMax = time.Second
	quietBackoffMin = time.Second
	// watchSlack is how much longer than the wait it asked for a long poll
	// waits for the trainer's answer.
	watchSlack = 10 * time.Second
)

// watch holds long polls on the trainer until ctx ends; interval is the
// poll's.
func (s *Syncer) watch(ctx context.Context, interval time.Duration) {
	hold := s.Watch
	if hold == 0 {
		hold = 30 * time.Second
	}
	client := &http.Client{} // bounded by each request's context instead of a timeout
	if s.Client != nil {
		client.Transport = s.Client.Transport
	}
	var backoff time.Duration
	for ctx.Err() == nil {
		// Each poll asks for its own wait, so a fleet's polls drift apart.
		wait := hold - time.Duration(rand.Int64N(int64(hold/5)+1))
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, wait+watchSlack)
		swapped, err := s.sync(rctx, client, wait, false)
		cancel()
		if ctx.Err() != nil {
			return
		}
		var busy *busyError
		switch {
		case errors.As(err, &busy):
			// The trainer holds as many long polls as it will: ask again
			// when it says, never later than the next poll would.
			s.logger().Debug("the trainer refused a long poll; the periodic poll continues", "trainer", s.trainer(), "error", err)
			backoff = min(max(busy.retryAfter, errorBackoffMax), max(interval, errorBackoffMax))
		case err != nil:
			s.logger().Debug("bundle long poll failed; the periodic poll continues", "trainer", s.trainer(), "error", err)
			backoff = min(max(2*backoff, errorBackoffMin), errorBackoffMax)
		case !swapped && time.Since(start) < wait/2:
			backoff = min(max(2*backoff, quietBackoffMin), max(interval, quietBackoffMin))
		default:
			backoff = 0
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(jitter(backoff, 0.2)):
		}
	}
}

// busyError is a trainer's 429 or 503: it holds as many long polls (or
// requests) as it will, and says when to ask again.
type busyError struct {
	status     int
	detail     string
	retryAfter time.Duration // 0 when the trainer did not say
	trainer    string
}

func (e *busyError) Error() string {
	return fmt.Sprintf("sync bundle from %s: status %d (busy, retry after %s): %s", e.trainer, e.status, e.retryAfter, e.detail)
}

// retryAfter reads a Retry-After header's delay in seconds; 0 when absent
// or an HTTP date (which a trainer never sends).
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(min(n, 3600)) * time.Second
}

// jitter returns d scaled by a random factor in [1-f, 1+f).
func jitter(d time.Duration, f float64) time.Duration {
	return time.Duration(float64(d) * (1 - f + 2*f*rand.Float64()))
}

// SyncOnce fetches the trainer's bundle if it changed and swaps it in
// when it is current (Predictor.Swap). It returns whether a new bundle
// went into service.
func (s *Syncer) SyncOnce(ctx context.Context) (bool, error) {
	return s.Reload(ctx, false)
}

// Reload is SyncOnce; with acceptOlder, what only an operator may ask
// (POST /reload?accept_older=true), it takes the trainer's bundle whatever
// its lineage and age (a trainer restored from a backup, one whose clock
// was wrong), and keeps only it on disk, so that a restart keeps it too.
func (s *Syncer) Reload(ctx context.Context, acceptOlder bool) (bool, error) {
	client := s.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	return s.sync(ctx, client, 0, acceptOlder)
}

// sync is one request for the bundle; with wait > 0, a long poll the
// trainer holds until it has a bundle other than the one in service, or
// wait has passed. anyAge is Reload's acceptOlder.
func (s *Syncer) sync(ctx context.Context, client *http.Client, wait time.Duration, anyAge bool) (bool, error) {
	url := strings.TrimSuffix(s.TrainerURL, "/") + BundlePath
	if wait > 0 {
		url += "?wait=" + wait.Round(time.Millisecond).String()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
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
		return false, fmt.Errorf("sync bundle from %s: %w", s.trainer(), err)
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
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		s.Metrics.syncResult("busy")
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return false, &busyError{status: resp.StatusCode, detail: strings.TrimSpace(string(body)),
			retryAfter: retryAfter(resp.Header.Get("Retry-After")), trainer: s.trainer()}
	default:
		s.Metrics.syncResult("http_error")
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return false, fmt.Errorf("sync bundle from %s: status %d: %s", s.trainer(), resp.StatusCode, strings.TrimSpace(string(body)))
	}
	var (
		swapped bool
		loadErr error
	)
	nice := s.Nice
	if !s.Predictor.Ready() {
		nice = 0
	}
	priority.RunNiced(nice, func() {
		s.loadMu.Lock()
		defer s.loadMu.Unlock()
		swapped, loadErr = s.load(resp.Body, anyAge)
	})
	return swapped, loadErr
}

// load reads a bundle from body, swaps it in if it is current (or, with
// anyAge, whatever it is) and keeps a copy in SaveDir.
func (s *Syncer) load(body io.Reader, anyAge bool) (bool, error) {
	data, err := io.ReadAll(io.LimitReader(body, maxBundleBytes+1))
	if err != nil {
		s.Metrics.syncResult("unreachable")
		return false, fmt.Errorf("sync bundle from %s: read: %w", s.trainer(), err)
	}
	if len(data) > maxBundleBytes {
		s.Metrics.syncResult("refused")
		return false, fmt.Errorf("sync bundle from %s: larger than %d bytes", s.trainer(), maxBundleBytes)
	}
	b, err := bundle.Decode(data, s.SigningKey)
	if err != nil {
		s.Metrics.syncResult("refused")
		return false, fmt.Errorf("sync bundle from %s: refused: %w", s.trainer(), err)
	}
	pub := &bundle.Published{Bundle: b, Encoded: data}
	prev, err := s.Predictor.swap(pub, time.Now().UTC(), anyAge)
	if err != nil {
		s.refused(b, prev, err)
		return false, nil
	}
	s.Metrics.syncResult("ok")
	s.Metrics.observeBundle(pub)
	lineageChanged := prev != nil && prev.Bundle.Epoch != b.Epoch
	older := prev != nil && bundle.CheckSuccessor(b, prev.Bundle, time.Now().UTC()) != nil
	switch {
	case older:
		s.Metrics.epochChanged()
		s.logger().Warn("taking an older bundle, as the operator asked (POST /reload?accept_older=true); the bundles kept on disk are only it now",
			"trainer", s.trainer(), "epoch", b.Epoch, "version", b.Version,
			"previous_epoch", prev.Bundle.Epoch, "previous_version", prev.Bundle.Version)
	case lineageChanged:
		s.Metrics.epochChanged()
		s.logger().Warn("the trainer started a new bundle lineage (its bundles were wiped, or it is another trainer); following it",
			"trainer", s.trainer(), "epoch", b.Epoch, "version", b.Version,
			"previous_epoch", prev.Bundle.Epoch, "previous_version", prev.Bundle.Version)
	}
	s.logger().Info("serving new bundle", "epoch", b.Epoch, "version", b.Version, "checksum", b.Checksum[:12])
	if s.SaveDir != "" {
		s.keep(b.Version, data, lineageChanged || older)
	}
	return true, nil
}

// refused counts and logs a bundle the trainer served that was not taken
// (err from bundle.CheckSuccessor), beside prev, the bundle in service.
// Nothing on disk changes: the bundles kept are the one in service's
// lineage, which a replay must not erase.
func (s *Syncer) refused(b *model.Bundle, prev *bundle.Published, err error) {
	var result, why string
	switch {
	case errors.Is(err, bundle.ErrSameBundle):
		s.Metrics.syncResult("ok")
		return
	case errors.Is(err, bundle.ErrStale):
		result, why = "stale", "the trainer serves an older bundle of the lineage in service; keeping the newer"
	case errors.Is(err, bundle.ErrOlderLineage):
		result, why = "older_lineage", "the trainer serves a bundle of a lineage older than the bundle in service "+
			"(a replay, or a trainer restored or replaced); keeping the newer: an operator may take it with POST /reload?accept_older=true"
	default:
		result, why = "future", "the trainer serves a bundle from the future (a clock ahead, or a forged time); refused"
	}
	s.Metrics.syncResult(result)
	args := []any{"trainer", s.trainer(), "epoch", b.Epoch, "version", b.Version, "created_at", b.CreatedAt}
	if prev != nil {
		args = append(args, "serving_epoch", prev.Bundle.Epoch, "serving_version", prev.Bundle.Version, "serving_created_at", prev.Bundle.CreatedAt)
	}
	s.logger().Warn(why, args...)
}

// keep saves the bundle in service as version v in SaveDir, with the one
// before it; on a new lineage (or an older bundle an operator asked for),
// alone: the others would outrank it when a restart chooses (LoadDir).
func (s *Syncer) keep(v uint64, data []byte, alone bool) {
	if _, err := bundle.Write(s.SaveDir, v, data); err != nil {
		s.logger().Warn("could not keep a local copy of the bundle", "error", err)
		return
	}
	prune := func() error { return bundle.Prune(s.SaveDir, 2) }
	if alone {
		prune = func() error { return bundle.RemoveExcept(s.SaveDir, v) }
	}
	if err := prune(); err != nil {
		s.logger().Warn("pruning local bundles failed", "error", err)
	}
}

// trainer is TrainerURL as logs and errors may show it.
func (s *Syncer) trainer() string { return RedactedURL(s.TrainerURL) }

// RedactedURL is raw as a status page or a log may show it: with the user
// information (a password, or a token given as the user name) replaced
// by "redacted", which the HTTP client still sends as basic-auth
// credentials. A URL that does not parse is shown as "(unparsable URL)":
// where its credentials end cannot be known.
func RedactedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.User != nil {
		u.User = url.User("redacted")
	}
	return u.String()
}

func (s *Syncer) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// LoadFile puts a bundle file in service, for a predictor that must answer
// before the trainer does. The operator named it: it is taken whatever its
// age.
func LoadFile(p *Predictor, path string, key []byte) (*bundle.Published, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load bundle %s: %w", path, err)
	}
	b, err := bundle.Decode(data, key)
	if err != nil {
		return nil, fmt.Errorf("load bundle %s: %w", path, err)
	}
	pub := &bundle.Published{Bundle: b, Encoded: data}
	p.swap(pub, time.Now().UTC(), true)
	return pub, nil
}

// LoadDir puts the newest valid bundle of dir in service, if there is one:
// newest by CheckSuccessor, not by version number, so that a crash between
// saving a new lineage's v1 and removing the old lineage's v57 does not
// bring the old one back.
func LoadDir(p *Predictor, dir string, key []byte) (*bundle.Published, error) {
	vs, err := bundle.Versions(dir)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	var best *bundle.Published
	for _, v := range vs {
		data, err := os.ReadFile(bundle.Path(dir, v))
		if err != nil {
			continue
		}
		b, err := bundle.Decode(data, key)
		if err != nil {
			continue // a copy that no longer verifies (another key): the trainer will answer
		}
		var cur *model.Bundle
		if best != nil {
			cur = best.Bundle
		}
		if bundle.CheckSuccessor(b, cur, now) == nil {
			best = &bundle.Published{Bundle: b, Encoded: data}
		}
	}
	if best == nil {
		return nil, nil
	}
	if !p.Swap(best, now) {
		return nil, nil // something newer is in service already
	}
	return best, nil
}
