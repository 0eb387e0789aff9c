// Package plugins puts Headroom's pair prediction (POST /predict/pairs,
// docs/PROTOCOL.md §4.7) inside llm-d's endpoint picker as plugins of its
// own framework, configured by an EndpointPickerConfig:
//
//   - headroom-pairs-producer, a data producer, asks the predictor once per
//     request about every candidate (the prefill pods and the decode pods by
//     llm-d's role label, each pod's metrics, in-flight load, prefix-cache
//     match and topology, the request's SLO headers) and stores the ranking
//     on the request; after the response it posts what the EPP observed to
//     the trainer in batches, as llm-d's predicted-latency-producer does;
//   - headroom-decode-scorer, in the decode profile, scores each decode pod
//     by the best option through it;
//   - headroom-prefill-scorer, in the prefill profile in place of
//     topology-affinity-scorer, reads the decode pick the disagg profile
//     handler publishes (its peer-endpoint attribute) and scores each
//     prefill pod by the predicted TTFT of that pair;
//   - headroom-split-filter, in the prefill profile, leaves no prefill pod
//     when the pod picked for decode is better alone, so the request is not
//     split (optional: by default llm-d's decider decides the split).
//
// The plugins fail open: when the predictor cannot be reached, answers
// after the deadline, has no model yet, or an extrapolated option could be
// the better route (it ranks at or above every option that is not
// extrapolated, whose estimates the model can vouch for), the ranking says
// why and the Headroom plugins score nothing, so the profile's stock
// scorers decide, and a metric counts each reason. An extrapolated option
// ranked below a trusted one is passed over: its estimate is likely low,
// so it cannot be the better route.
//
// The package imports llm-d's framework and, of Headroom's code, only that
// rule (pairs/guard, a module without dependencies, which Headroom's own
// joint router follows too): it is a client of Headroom's HTTP protocol.
package plugins
