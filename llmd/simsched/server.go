// Package simsched serves llm-d's scheduling to a simulator: a router is an
// EndpointPickerConfig loaded into llm-d's own scheduler in this process
// (package inproc: llm-d's loader, its plugins and Headroom's, the data
// producers, both profiles of the disagg profile handler, the
// request-control hooks; llm-d's max-score-picker replaced by one whose tie
// breaks follow the run's seed, picker.go), and the simulator, which cannot link llm-d,
// asks it over loopback HTTP to schedule each request and tells it what
// the EPP would see of each response. Time is the simulator's: every call
// says when it happens, and the Headroom producers measure latencies and
// stamp their training entries with that clock, so what they post to the
// trainer is what an EPP in front of the simulated fleet would post.
//
// Routes (JSON, wire.go):
//
//	POST   /routers               CreateRequest → 201 CreateAnswer
//	POST   /routers/{id}/schedule ScheduleRequest → ScheduleAnswer
//	POST   /routers/{id}/events   EventsRequest → 204
//	GET    /routers/{id}/report   → Report
//	DELETE /routers/{id}          → 204
//
// Errors are {"detail": "…"} with 400 (a body that is not what the route
// takes), 404 (no such router or config) or 500 (llm-d's scheduler failed).
package simsched

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/picker/maxscore"

	"github.com/headroomhq/headroom/llmd/inproc"
)

// Bounds on what a client can make the server hold.
const (
	maxBody    = 8 << 20
	maxRouters = 16
)

// Server is the scheduling server. Its zero value is not usable: New.
type Server struct {
	ctx     context.Context
	configs map[string][]byte // EndpointPickerConfigs by name

	mu      sync.Mutex
	routers map[string]*router
	seq     int
}

// New serves the configs (YAML, by name) until ctx ends, which also ends
// every router's plugins.
func New(ctx context.Context, configs map[string][]byte) *Server {
	inproc.Substitute(maxscore.MaxScorePickerType, seededPickerFactory)
	return &Server{ctx: ctx, configs: configs, routers: map[string]*router{}}
}

// Handler is the server's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /routers", s.create)
	mux.HandleFunc("POST /routers/{id}/schedule", s.withRouter(func(w http.ResponseWriter, r *http.Request, rt *router) {
		var req ScheduleRequest
		if !decode(w, r, &req) {
			return
		}
		answer, err := rt.schedule(&req)
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		writeJSON(w, http.StatusOK, answer)
	}))
	mux.HandleFunc("POST /routers/{id}/events", s.withRouter(func(w http.ResponseWriter, r *http.Request, rt *router) {
		var req EventsRequest
		if !decode(w, r, &req) {
			return
		}
		if err := rt.deliver(r.Context(), req.Events, req.Flush); err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("GET /routers/{id}/report", s.withRouter(func(w http.ResponseWriter, _ *http.Request, rt *router) {
		report, err := rt.report()
		if err != nil {
			writeError(w, http.StatusInternalServerError, err)
			return
		}
		writeJSON(w, http.StatusOK, report)
	}))
	mux.HandleFunc("DELETE /routers/{id}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		rt, ok := s.routers[r.PathValue("id")]
		delete(s.routers, r.PathValue("id"))
		s.mu.Unlock()
		if !ok {
			writeError(w, http.StatusNotFound, fmt.Errorf("no router %q", r.PathValue("id")))
			return
		}
		rt.close()
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// Close ends every router.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, rt := range s.routers {
		rt.close()
		delete(s.routers, id)
	}
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req CreateRequest
	if !decode(w, r, &req) {
		return
	}
	config, ok := s.configs[req.Config]
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Errorf("no config %q (have %s)", req.Config, names(s.configs)))
		return
	}
	s.mu.Lock()
	full := len(s.routers) >= maxRouters
	s.mu.Unlock()
	if full {
		writeError(w, http.StatusBadRequest, fmt.Errorf("%d routers already: delete one first", maxRouters))
		return
	}
	rt, err := newRouter(s.ctx, config, req.Producer, req.PrefixIndex, req.Seed)
	if err != nil {
		writeError(w, statusOf(err), fmt.Errorf("config %q: %w", req.Config, err))
		return
	}
	s.mu.Lock()
	s.seq++
	id := strconv.Itoa(s.seq)
	s.routers[id] = rt
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, CreateAnswer{ID: id})
}

func (s *Server) withRouter(h func(http.ResponseWriter, *http.Request, *router)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		rt, ok := s.routers[r.PathValue("id")]
		s.mu.Unlock()
		if !ok {
			writeError(w, http.StatusNotFound, fmt.Errorf("no router %q", r.PathValue("id")))
			return
		}
		h(w, r, rt)
	}
}

// errBadRequest marks an error of the client's making.
var errBadRequest = errors.New("bad request")

func statusOf(err error) int {
	if errors.Is(err, errBadRequest) {
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("%s %s: %w", r.Method, r.URL.Path, err))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"detail": err.Error()})
}

func names(m map[string][]byte) string {
	return strings.Join(slices.Sorted(maps.Keys(m)), ", ")
}
