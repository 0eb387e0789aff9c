package trainer

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/trainer/fit"
)

// SelectConfig configures self-tuning: each target's choice among
// candidate configurations (fit.Score, fit.Pick), and when it chooses
// again. The zero value of each field means its default.
type SelectConfig struct {
	// Off fits every model as Config.Fit says, choosing nothing.
	Off bool
	// ScoreOptions say how the candidates are scored and one chosen; nil
	// Candidates means fit.DefaultCandidates(Config.Fit).
	fit.ScoreOptions
	// Every is how many models a choice serves before it is made again
	// (default 10). It is made again sooner when the target's training
	// rows have doubled since (a store filling up: a choice on 300 rows
	// need not hold on 3,000), and after a drift-triggered retrain; never
	// within MinInterval of the last but for a drift.
	Every int
	// MinInterval is the least time between two choices of a target
	// (default a minute; negative: none), the first choice, one after a
	// drift and one for a changed configuration aside. A store filling
	// fast doubles every few retrains, and a choice costs more than a
	// retrain: under the race detector, choices at every doubling cut a
	// soak's retrains from nine bundles in 10 s to four.
	MinInterval time.Duration
}

func (c *SelectConfig) setDefaults(opts fit.Options) {
	c.ScoreOptions.SetDefaults(opts)
	if c.Every <= 0 {
		c.Every = 10
	}
	if c.MinInterval == 0 {
		c.MinInterval = time.Minute
	}
}

// tuning is one target's self-tuning state (chooser).
type tuning struct {
	choice *model.Selection // nil before the first choice
	// since counts the models fitted with the choice; rows is how many
	// training rows the store held when it was made.
	since int
	rows  int
	// drift asks for a new choice at the next retrain.
	drift bool
}

// chooser is one target's choice of configuration: which candidate its
// models are fitted with, and when it chooses again. Its methods are safe
// for concurrent use.
type chooser struct {
	tg      features.Target
	cfg     SelectConfig
	now     func() time.Time
	logger  *slog.Logger
	metrics *Metrics

	mu sync.Mutex
	st tuning
}

// candidate returns the configured candidate named name.
func (ch *chooser) candidate(name string) (fit.Candidate, bool) {
	for _, c := range ch.cfg.Candidates {
		if c.Name == name {
			return c, true
		}
	}
	return fit.Candidate{}, false
}

// choice is the choice in force, nil before the first.
func (ch *chooser) choice() *model.Selection {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.st.choice
}

// tune returns the configuration the target's next model is fitted with,
// and the selection to record in it: the current choice, made again first
// when it is due (SelectConfig.Every) and choose is set. Until a choice is
// possible, the first candidate is used and nothing is recorded.
func (ch *chooser) tune(ctx context.Context, schema features.Schema, train fit.Dataset, cfg fit.Options, choose bool) (fit.Options, *model.Selection, error) {
	sel := ch.cfg
	// Without xgboost every model is a line: there is nothing to choose.
	if sel.Off || len(sel.Candidates) == 0 || cfg.XGBoost == nil {
		return cfg, nil, nil
	}
	ch.mu.Lock()
	st := ch.st
	ch.mu.Unlock()
	_, known := ch.candidate(choiceName(st.choice))
	reason := ""
	switch {
	case st.choice == nil:
		reason = "first"
	case !known:
		reason = "configuration changed"
	case st.drift:
		reason = "drift"
	case sel.MinInterval > 0 && ch.now().Sub(st.choice.At) < sel.MinInterval:
		// Too soon after the last choice, whatever else says it is due.
	case len(train.Y) >= 2*st.rows:
		reason = "rows grew"
	case st.since >= sel.Every:
		reason = fmt.Sprintf("every %d retrains", sel.Every)
	}
	if reason != "" && choose {
		s, err := fit.Score(ctx, schema, train, cfg, sel.ScoreOptions)
		if err != nil {
			if ctx.Err() != nil {
				return cfg, nil, err
			}
			// A candidate's trees failing is xgboost failing: no choice is
			// made (the line must not win by default), and the model's own
			// fit below meets the same failure and reports it.
			ch.logger.Warn("choosing a configuration failed; keeping the current one", "target", ch.tg, "error", err)
		}
		if s != nil {
			// The first candidate, not the one in use, is what others
			// must beat by Margin: a choice made on few rows must not hold
			// against a default that later scores show better.
			incumbent := sel.Candidates[0].Name
			s.Chosen, s.Reason, s.At = fit.Pick(s, incumbent, fit.ChoiceMargin(sel.Margin, s.ScoreRows)), reason, ch.now().UTC()
			s.TrainRows = len(train.Y)
			st = tuning{choice: s, rows: len(train.Y)}
			ch.metrics.observeSelection(ch.tg, s)
			scores := make([]string, len(s.Candidates))
			for i, c := range s.Candidates {
				scores[i] = fmt.Sprintf("%s=%.2f(%+.2f±%.2f)", c.Name, c.MAPE, c.Gain, c.GainSE)
			}
			ch.logger.Info("configuration chosen", "target", ch.tg, "chosen", s.Chosen, "reason", reason,
				"train_rows", s.TrainRows, "score_rows", s.ScoreRows, "mape", strings.Join(scores, " "))
		}
	}
	c, ok := ch.candidate(choiceName(st.choice))
	if !ok {
		return sel.Candidates[0].Apply(cfg), nil, nil
	}
	rec := *st.choice
	rec.RetrainsSince = st.since
	st.since++
	ch.mu.Lock()
	ch.st = st
	ch.mu.Unlock()
	return c.Apply(cfg), &rec, nil
}

// choiceName is the chosen candidate's name, "" without a choice.
func choiceName(s *model.Selection) string {
	if s == nil {
		return ""
	}
	return s.Chosen
}

// afterDrift asks for a new choice at the next retrain.
func (ch *chooser) afterDrift() {
	ch.mu.Lock()
	ch.st.drift = true
	ch.mu.Unlock()
}

// resume takes a loaded model's choice as the chooser's own, so a restart
// does not choose again at once.
func (ch *chooser) resume(m *model.TargetModel) {
	if m == nil || m.Selection == nil {
		return
	}
	ch.mu.Lock()
	ch.st = tuning{choice: m.Selection, since: m.Selection.RetrainsSince + 1, rows: m.Selection.TrainRows}
	ch.mu.Unlock()
}
