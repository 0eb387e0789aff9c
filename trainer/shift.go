package trainer

import (
	"time"
)

// A shift is a rise of a target's live error, the error of the model in
// service on the samples that arrive, well above its holdout error
// (DriftConfig.Factor, MarginPoints). The trainer judges each one: a
// drift, when the rise persists across time, places and uploads (the
// workload changed: follow it), or a burst, when it does not (one upload,
// a retry loop, a client's minute: do not). Before this judgment, any rise
// over 100 samples retrained early, and the gate published a candidate
// that beat the model in service on the newest 500 live samples whatever
// its holdout said, so 500 rows of one upload bought the model (issue 26).
// In llm-d the router is the only client, so who sent the samples cannot
// tell a burst from a drift; when and where they came from can.
//
// The evidence is kept per minute of arrival (the trainer's clock), each
// minute with its rows, the mean of their errors, the uploads they came in
// and the places they came from (the store's bucket of the row: a part of
// the fleet's load), over the ShiftSpan before now and since the model
// changed. The KV-transfer target's shifts are judged from one place, and
// so never as a drift: its law is refitted on the samples that arrive, and
// its gate always measures on the whole holdout. A
// minute is elevated when its own error is well above the holdout's, on
// MinSlotRows rows at least. A drift needs Minutes elevated minutes, with
// Uploads uploads and Places places among them; fewer is a burst.

// Shift judgments, in Status and the headroom_live_shift metric.
const (
	ShiftNone  = "none"  // the live error is not well above the holdout's
	ShiftBurst = "burst" // it is, but briefly or narrowly: not followed
	ShiftDrift = "drift" // it is, persistently and broadly: followed
)

// ShiftStatus is a target's newest shift judgment.
type ShiftStatus struct {
	Judgment string `json:"judgment"`
	// Since is the first elevated minute of the shift; Minutes, Uploads
	// and Places what the elevated minutes hold (Places counted up to
	// what a drift needs).
	Since   time.Time `json:"since,omitzero"`
	Minutes int       `json:"minutes,omitempty"`
	Uploads int       `json:"uploads,omitempty"`
	Places  int       `json:"places,omitempty"`
	// Need is what a drift needs: minutes, uploads, places.
	Need [3]int `json:"need"`
	// elevated lists the elevated minutes (Unix minutes), oldest first.
	elevated []int64
}

// shiftSlot is one minute of arrivals' evidence.
type shiftSlot struct {
	minute  int64 // Unix minutes
	rows    int
	apeSum  float64
	uploads int
	places  map[int]struct{} // at most DriftConfig.ShiftPlaces entries
}

// shiftTracker keeps the slots of the Span, oldest first. Guarded by the
// targetLive's lock.
type shiftTracker struct {
	slots []shiftSlot
	// open says the current upload has been counted in the newest slot.
	open bool
}

// beginUpload starts an upload's scoring at now.
func (s *shiftTracker) beginUpload() { s.open = false }

// add records one sample's error (percent) at now, from place.
func (s *shiftTracker) add(now time.Time, ape float64, place int, maxPlaces int) {
	minute := now.Unix() / 60
	if n := len(s.slots); n == 0 || s.slots[n-1].minute != minute {
		s.slots = append(s.slots, shiftSlot{minute: minute, places: map[int]struct{}{}})
		s.open = false
	}
	sl := &s.slots[len(s.slots)-1]
	sl.rows++
	sl.apeSum += ape
	if !s.open {
		sl.uploads++
		s.open = true
	}
	if len(sl.places) < maxPlaces {
		sl.places[place] = struct{}{}
	}
}

// reset forgets every slot: a new model is judged afresh.
func (s *shiftTracker) reset() { s.slots, s.open = nil, false }

// judge is the judgment at now of a model of holdout MAPE hold.
func (d *driftTracker) judgeShift(s *shiftTracker, hold float64, now time.Time) ShiftStatus {
	c := d.cfg
	st := ShiftStatus{Judgment: ShiftNone, Need: [3]int{c.ShiftMinutes, c.ShiftUploads, c.ShiftPlaces}}
	from := now.Add(-c.ShiftSpan).Unix() / 60
	keep := 0
	for keep < len(s.slots) && s.slots[keep].minute < from {
		keep++
	}
	s.slots = s.slots[keep:]
	places := map[int]struct{}{}
	for _, sl := range s.slots {
		if sl.rows < c.ShiftSlotRows {
			continue
		}
		mape := sl.apeSum / float64(sl.rows)
		if !(mape > c.Factor*hold && mape > hold+c.MarginPoints) {
			continue
		}
		if st.Minutes == 0 {
			st.Since = time.Unix(sl.minute*60, 0).UTC()
		}
		st.elevated = append(st.elevated, sl.minute)
		st.Minutes++
		st.Uploads += sl.uploads
		for p := range sl.places {
			if len(places) < c.ShiftPlaces {
				places[p] = struct{}{}
			}
		}
	}
	st.Places = len(places)
	switch {
	case st.Minutes == 0:
	case st.Minutes >= c.ShiftMinutes && st.Uploads >= c.ShiftUploads && st.Places >= c.ShiftPlaces:
		st.Judgment = ShiftDrift
	default:
		st.Judgment = ShiftBurst
	}
	return st
}
