package service

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/headroomhq/headroom/api"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer"
	"github.com/headroomhq/headroom/wire"
	"github.com/headroomhq/headroom/xgboost"
)

// Config is what one process runs: a trainer, a predictor, or both. Start
// from DefaultConfig, DefaultTrainerConfig and DefaultPredictorConfig and
// change what differs; unlike the packages underneath, no zero field here
// means "default", so a zero that slipped through is refused by Validate
// rather than silently replaced.
type Config struct {
	Trainer   *TrainerConfig   // nil: no training role
	Predictor *PredictorConfig // nil: no prediction role

	// DataDir holds the trainer's sample store and bundles, and a
	// standalone predictor's last fetched bundle (empty: a predictor keeps
	// none; a trainer needs one).
	DataDir string
	// Objective is what predictions serve: the mean, or Quantile. Quantile
	// is also the quantile whose coverage the trainer tracks.
	Objective predictor.Objective
	Quantile  float64
	// Tokens guard the HTTP routes (empty: open). SigningKey, when set (at
	// least 16 bytes), signs the trainer's bundles, and a predictor refuses
	// bundles not signed with it.
	Tokens     api.Tokens
	SigningKey []byte
	// AllowedHosts are the host names, besides loopback and IP literals,
	// that ingest, flush and reload may be addressed to when no write token
	// is set (api.TrainerOptions.AllowedHosts).
	AllowedHosts []string
	// Limits bound one request; both must be positive (MaxEntries 0 takes
	// api's default).
	Limits api.Limits
	// MaxConnections is the connections each server keeps open at most
	// (0: the process's descriptor limit, less a reserve, shared by its
	// servers); past it, the oldest not serving a request is closed.
	MaxConnections int
	// ShutdownGrace bounds each step of Run's shutdown: draining in-flight
	// requests, then stopping the retrain and sync loops.
	ShutdownGrace time.Duration
	// Manual starts no retrain loop and no bundle sync: the caller drives
	// them with Retrain and Sync (a simulation, in its own time). The HTTP
	// servers run as usual.
	Manual bool
	Logger *slog.Logger // nil discards
}

// TrainerConfig configures the training role.
type TrainerConfig struct {
	// Listen is the training server's host:port. Port 0 takes a free port
	// (TrainerURL reports it).
	Listen          string
	RetrainInterval time.Duration
	// Now is the trainer's clock (nil: time.Now): the time its live
	// tracking, its self-tuning's intervals and its bundles read. A
	// simulation that drives the trainer (Manual) gives its own, so that
	// what the trainer decides follows the simulated time, not how fast
	// the simulation ran.
	Now func() time.Time
	// MinSamplesFresh samples make a target's first model, MinSamples more
	// each retrain after (trainer.Config).
	MinSamples      int
	MinSamplesFresh int
	// MaxTrainRows caps the samples one fit reads per target; negative
	// means all of them.
	MaxTrainRows int
	// Store shapes the sample store; BucketCapacity and HoldoutCapacity
	// must be positive and HoldoutFraction in (0, 1).
	Store store.Options
	// StoreReset moves a corrupt or incompatible store file aside and
	// starts empty instead of refusing to start.
	StoreReset bool
	// MaxConcurrentIngest uploads and MaxIngestBytes bytes of their bodies
	// are handled at once.
	MaxConcurrentIngest int
	MaxIngestBytes      int64
	// MaxBundleWatchers long polls for a new bundle are held at once, at
	// most MaxBundleWatchersPerClient of one client address
	// (api.TrainerOptions).
	MaxBundleWatchers          int
	MaxBundleWatchersPerClient int
	// Kind is the model composition, Params the boosting parameters.
	// XGBoost runs the trees' fits (nil: linear models only). With
	// SelfTune, Kind and Params are the first of the candidates each
	// target chooses among (trainer.SelectConfig); without, every model.
	SelfTune bool
	Kind     model.Kind
	Params   xgboost.Params
	XGBoost  *xgboost.CLI
	// Nice (0-19) is the niceness of the fits and the publication; 0 keeps
	// the process's.
	Nice int
	// PublishForce publishes every new model even when the publication
	// gate refuses it (trainer.GateConfig.Force).
	PublishForce bool
	// FixedLevels serves every quantile at its calibrated level, without
	// the live correction of coverage (trainer.DriftConfig.FixedLevels).
	FixedLevels bool
	// KVBytesPerToken is the pool's KV-cache bytes per token, for transfer
	// samples that do not report kv_bytes_per_token; 0 learns it from those
	// that do (fit.TransferOptions.BytesPerToken).
	KVBytesPerToken float64
}

// PredictorConfig configures the prediction role. Beside a trainer in the
// same process it takes every bundle in memory as it is published, and
// only Listen applies; alone it polls TrainerURL.
type PredictorConfig struct {
	Listen string // host:port; port 0 takes a free port
	// TrainerURL is the trainer a standalone predictor polls every
	// SyncInterval; a new bundle loads at niceness SyncNice (0-19).
	TrainerURL   string
	SyncInterval time.Duration
	SyncNice     int
	// BundleFile, when set, is served at start, before the trainer answers;
	// otherwise the last bundle saved in DataDir is.
	BundleFile string
	// Client fetches bundles (nil: a client with a 10 s timeout).
	Client *http.Client
	// MaxConcurrentPredictions requests, holding MaxPredictBytes bytes by
	// estimate, are handled at once, MaxLargePredictions of them computing
	// over 512 rows or pairs (0: every core but one); PairsK pairs are
	// returned to a /predict/pairs request that does not say
	// (api.PredictorOptions).
	MaxConcurrentPredictions int
	MaxPredictBytes          int64
	MaxLargePredictions      int
	PairsK                   int
}

// DefaultConfig is the service's configuration with neither role: add
// DefaultTrainerConfig, DefaultPredictorConfig or both.
func DefaultConfig() Config {
	return Config{
		DataDir:   "./data",
		Objective: predictor.Mean,
		Quantile:  model.DefaultQuantile,
		Limits: api.Limits{MaxBodyBytes: 64 << 20, MaxRows: 10000, MaxPairCandidates: wire.DefaultMaxPairCandidates,
			MaxPairs: api.DefaultMaxPairs},
		ShutdownGrace: 15 * time.Second,
	}
}

// DefaultTrainerConfig is the training role as `headroom trainer` runs it
// without flags.
func DefaultTrainerConfig() TrainerConfig {
	return TrainerConfig{
		Listen:          "127.0.0.1:8000",
		RetrainInterval: trainer.DefaultInterval,
		MinSamples:      trainer.DefaultMinSamples,
		MinSamplesFresh: trainer.DefaultMinSamplesFresh,
		MaxTrainRows:    trainer.DefaultMaxTrainRows,
		Store: store.Options{
			BucketCapacity:  500,
			HoldoutFraction: 0.1,
			HoldoutCapacity: 1000,
			HoldoutSpread:   store.DefaultHoldoutSpread,
			Scheme:          store.DefaultScheme(),
		},
		MaxConcurrentIngest:        api.DefaultMaxConcurrentIngest,
		MaxIngestBytes:             api.DefaultMaxIngestBytes,
		MaxBundleWatchers:          api.DefaultMaxBundleWatchers,
		MaxBundleWatchersPerClient: api.DefaultMaxBundleWatchersPerClient,
		SelfTune:                   true,
		Kind:                       model.KindResidual,
		Params:                     xgboost.DefaultParams(),
		XGBoost: &xgboost.CLI{Binary: "xgboost", Timeout: xgboost.DefaultTimeout, Nice: 10,
			Idle: true, IdleGrace: xgboost.DefaultIdleGrace},
		Nice: 10,
	}
}

// DefaultPredictorConfig is the prediction role as `headroom predictor`
// runs it without flags.
func DefaultPredictorConfig() PredictorConfig {
	return PredictorConfig{
		Listen:                   "127.0.0.1:8001",
		TrainerURL:               "http://127.0.0.1:8000",
		SyncInterval:             30 * time.Second,
		SyncNice:                 10,
		MaxConcurrentPredictions: api.DefaultMaxConcurrentPredictions,
		MaxPredictBytes:          api.DefaultMaxPredictBytes,
		PairsK:                   api.DefaultPairsK,
	}
}

// A FieldError is one problem with a Config: Field names the setting as
// a Go selector on Config ("Trainer.Listen"), so a command can name its
// own flag instead; Other, when set, is the setting it clashes with.
type FieldError struct {
	Field   string
	Other   string
	Problem string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// Validate reports every problem with c, each a *FieldError (joined with
// errors.Join), or nil. New calls it before it opens anything.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	if c.Trainer == nil && c.Predictor == nil {
		bad("Trainer", "neither a trainer nor a predictor configured: nothing to run")
	}
	switch c.Objective {
	case predictor.Mean, predictor.Quantile:
	default:
		bad("Objective", "%q: want %q or %q", c.Objective, predictor.Mean, predictor.Quantile)
	}
	if !(c.Quantile > 0 && c.Quantile < 1) {
		bad("Quantile", "%v: want a value strictly between 0 and 1", c.Quantile)
	}
	if c.SigningKey != nil && len(c.SigningKey) < 16 {
		bad("SigningKey", "a key of %d bytes, shorter than 16 bytes", len(c.SigningKey))
	}
	if c.Limits.MaxBodyBytes < 1 {
		bad("Limits.MaxBodyBytes", "%d: want at least 1", c.Limits.MaxBodyBytes)
	}
	if c.Limits.MaxRows < 1 {
		bad("Limits.MaxRows", "%d: want at least 1", c.Limits.MaxRows)
	}
	if c.Limits.MaxPairCandidates < 1 {
		bad("Limits.MaxPairCandidates", "%d: want at least 1", c.Limits.MaxPairCandidates)
	}
	if c.Limits.MaxPairs < 1 {
		bad("Limits.MaxPairs", "%d: want at least 1", c.Limits.MaxPairs)
	}
	if c.Limits.MaxEntries < 0 {
		bad("Limits.MaxEntries", "%d: want 0 (default) or more", c.Limits.MaxEntries)
	}
	if c.MaxConnections < 0 {
		bad("MaxConnections", "%d: want 0 (from the descriptor limit) or more", c.MaxConnections)
	}
	if c.ShutdownGrace <= 0 {
		bad("ShutdownGrace", "%v: must be positive (in-flight requests would be cut off)", c.ShutdownGrace)
	}
	if t := c.Trainer; t != nil {
		errs = append(errs, t.validate(c.DataDir)...)
	}
	if p := c.Predictor; p != nil {
		errs = append(errs, p.validate(c.Trainer != nil)...)
	}
	if c.Trainer != nil && c.Predictor != nil {
		if err := distinctAddrs("Trainer.Listen", c.Trainer.Listen, "Predictor.Listen", c.Predictor.Listen); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (t *TrainerConfig) validate(dataDir string) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: "Trainer." + field, Problem: fmt.Sprintf(format, args...)})
	}
	if dataDir == "" {
		errs = append(errs, &FieldError{Field: "DataDir", Problem: "empty: the trainer keeps its samples and bundles there"})
	}
	if _, _, err := parseListen(t.Listen); err != nil {
		bad("Listen", "%v", err)
	}
	if t.RetrainInterval <= 0 {
		bad("RetrainInterval", "%v: must be positive", t.RetrainInterval)
	}
	if t.MinSamples < 1 {
		bad("MinSamples", "%d: want at least 1", t.MinSamples)
	}
	if t.MinSamplesFresh < 1 {
		bad("MinSamplesFresh", "%d: want at least 1", t.MinSamplesFresh)
	}
	if t.MaxTrainRows == 0 {
		bad("MaxTrainRows", "0: want a positive cap, or negative for every stored sample")
	}
	if !(t.KVBytesPerToken >= 0 && t.KVBytesPerToken <= wire.MaxKVBytesPerToken) {
		bad("KVBytesPerToken", "%v: want 0 (learn it from the samples) or bytes up to %d", t.KVBytesPerToken, wire.MaxKVBytesPerToken)
	}
	if t.Store.BucketCapacity < 1 {
		bad("Store.BucketCapacity", "%d: want at least 1", t.Store.BucketCapacity)
	}
	if !(t.Store.HoldoutFraction > 0 && t.Store.HoldoutFraction < 1) {
		bad("Store.HoldoutFraction", "%v: want a fraction strictly between 0 and 1 (the holdout measures every model)", t.Store.HoldoutFraction)
	}
	if t.Store.HoldoutCapacity < 1 {
		bad("Store.HoldoutCapacity", "%d: want at least 1", t.Store.HoldoutCapacity)
	}
	if t.Store.HoldoutSpread < 1 {
		bad("Store.HoldoutSpread", "%d: want at least 1 (1: one minute may fill the holdout)", t.Store.HoldoutSpread)
	}
	if t.MaxConcurrentIngest < 1 {
		bad("MaxConcurrentIngest", "%d: want at least 1", t.MaxConcurrentIngest)
	}
	if t.MaxIngestBytes < 1 {
		bad("MaxIngestBytes", "%d: want at least 1", t.MaxIngestBytes)
	}
	if t.MaxBundleWatchers < 1 {
		bad("MaxBundleWatchers", "%d: want at least 1", t.MaxBundleWatchers)
	}
	if t.MaxBundleWatchersPerClient < 1 {
		bad("MaxBundleWatchersPerClient", "%d: want at least 1", t.MaxBundleWatchersPerClient)
	}
	switch t.Kind {
	case model.KindLinear, model.KindLogTrees, model.KindResidual:
	default:
		bad("Kind", "%q: want %s, %s or %s", t.Kind, model.KindLinear, model.KindLogTrees, model.KindResidual)
	}
	if err := t.Params.Validate(); err != nil {
		bad("Params", "%v", err)
	}
	if t.Nice < 0 || t.Nice > 19 {
		bad("Nice", "%d: want 0 to 19", t.Nice)
	}
	if x := t.XGBoost; x != nil {
		if x.Timeout <= 0 {
			bad("XGBoost.Timeout", "%v: must be positive", x.Timeout)
		}
		if x.Nice < 0 || x.Nice > 19 {
			bad("XGBoost.Nice", "%d: want 0 to 19", x.Nice)
		}
		if x.Idle && x.IdleGrace <= 0 {
			bad("XGBoost.IdleGrace", "%v: must be positive, or no idle-class run would ever finish", x.IdleGrace)
		}
	}
	return errs
}

func (p *PredictorConfig) validate(withTrainer bool) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: "Predictor." + field, Problem: fmt.Sprintf(format, args...)})
	}
	if _, _, err := parseListen(p.Listen); err != nil {
		bad("Listen", "%v", err)
	}
	if p.MaxConcurrentPredictions < 1 {
		bad("MaxConcurrentPredictions", "%d: want at least 1", p.MaxConcurrentPredictions)
	}
	if p.MaxPredictBytes < 1<<20 {
		bad("MaxPredictBytes", "%d: want at least 1 MiB (a 10-row request's answer is 5 KB, a 10,000-row one's 12 MB)", p.MaxPredictBytes)
	}
	if p.MaxLargePredictions < 0 {
		bad("MaxLargePredictions", "%d: want 0 (every core but one) or more", p.MaxLargePredictions)
	}
	if p.PairsK < 1 {
		bad("PairsK", "%d: want at least 1", p.PairsK)
	}
	if withTrainer {
		// Settings that would be ignored are refused: whoever set them
		// expected them to matter.
		if p.TrainerURL != "" {
			bad("TrainerURL", "%q set beside an in-process trainer, whose bundles the predictor takes in memory", p.TrainerURL)
		}
		if p.BundleFile != "" {
			bad("BundleFile", "%q set beside an in-process trainer, whose bundles the predictor takes in memory", p.BundleFile)
		}
		return errs
	}
	if u, err := url.Parse(p.TrainerURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		why := ""
		if err != nil {
			why = " (" + err.Error() + ")"
		}
		bad("TrainerURL", "%q: want an http:// or https:// URL with a host%s", p.TrainerURL, why)
	}
	if p.SyncInterval <= 0 {
		bad("SyncInterval", "%v: must be positive", p.SyncInterval)
	}
	if p.SyncNice < 0 || p.SyncNice > 19 {
		bad("SyncNice", "%d: want 0 to 19", p.SyncNice)
	}
	return errs
}

// listenHost is a listen address's host, normalised so that equal hosts
// compare equal: the wildcard ("", 0.0.0.0, ::), an IP address
// (IPv4-mapped IPv6 unmapped), or a lower-case name.
type listenHost struct {
	wildcard bool
	ip       netip.Addr
	name     string
}

// parseListen checks a host:port listen address: a port number in
// [0, 65535], a host that is an IP address, a name, or empty.
func parseListen(addr string) (listenHost, int, error) {
	if addr == "" {
		return listenHost{}, 0, errors.New("empty: want host:port")
	}
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return listenHost{}, 0, fmt.Errorf("%q: %w", addr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > math.MaxUint16 {
		return listenHost{}, 0, fmt.Errorf("%q: port %q: want a number from 0 to 65535", addr, portText)
	}
	if host == "" {
		return listenHost{wildcard: true}, port, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		return listenHost{wildcard: ip.IsUnspecified(), ip: ip}, port, nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if name == "" || strings.ContainsAny(name, " /\\") {
		return listenHost{}, 0, fmt.Errorf("%q: host %q is neither an IP address nor a name", addr, host)
	}
	return listenHost{name: name}, port, nil
}

// overlaps reports whether listeners on h and o with the same port would
// claim the same socket: either is the wildcard, they are the same
// address or name, or one is "localhost" and the other a loopback address.
// Other names are not resolved (Validate opens nothing, the network
// included); the listen then fails with "address already in use".
func (h listenHost) overlaps(o listenHost) bool {
	switch {
	case h.wildcard || o.wildcard:
		return true
	case h.ip.IsValid() && o.ip.IsValid():
		return h.ip == o.ip
	case h.name != "" && o.name != "":
		return h.name == o.name
	}
	name, ip := h.name, o.ip
	if name == "" {
		name, ip = o.name, h.ip
	}
	return name == "localhost" && ip.IsLoopback()
}

// distinctAddrs refuses two listen addresses that would share a socket,
// which the kernel would refuse too, or worse: one role's server would
// take the other's requests. Port 0 never clashes (each listener gets a
// port of its own).
func distinctAddrs(field, addr, otherField, other string) error {
	h, port, err := parseListen(addr)
	if err != nil {
		return nil // reported on its own
	}
	o, otherPort, err := parseListen(other)
	if err != nil || port == 0 || port != otherPort || !h.overlaps(o) {
		return nil
	}
	how := "the same address"
	if addr != other {
		how = "the same socket"
	}
	return &FieldError{Field: otherField, Other: field,
		Problem: fmt.Sprintf("%q and %s %q are %s: each role needs a listen address of its own", other, field, addr, how)}
}
