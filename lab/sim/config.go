package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Config is one fleet configuration: how many servers, and how each engine
// is set up. Every server in a fleet has the same configuration.
type Config struct {
	Name                string `json:"name"`
	Servers             int    `json:"servers"`
	KVBlocks            int    `json:"kv_blocks"`
	PrefixCaching       bool   `json:"prefix_caching"`
	MaxNumSeqs          int    `json:"max_num_seqs"`
	MaxNumBatchedTokens int    `json:"max_num_batched_tokens"`
	// MaxModelLen, when positive, is the longest sequence (prompt and
	// output) the engine accepts; a longer request is rejected, as vLLM
	// refuses it.
	MaxModelLen int `json:"max_model_len,omitempty"`
	// AsyncScheduling is vLLM's asynchronous scheduling: the scheduler
	// prepares each step while the one before runs, so a request arriving
	// during a step waits for the one after the next (it costs a new
	// request one step of TTFT), and the steps run back to back.
	AsyncScheduling bool `json:"async_scheduling,omitempty"`
	// Cost is the linear step cost fitted to the H200 trace; Roofline, when
	// set, prices steps from the model and the GPU instead (Steps).
	Cost     CostModel `json:"cost"`
	Roofline *Roofline `json:"roofline,omitempty"`
}

// Steps is the model that prices the engine's steps: Roofline when set,
// else Cost.
func (c Config) Steps() StepModel {
	if c.Roofline != nil {
		return *c.Roofline
	}
	return c.Cost
}

// DefaultConfig is a vLLM engine serving Qwen3-32B on one H200, as in the
// shared trace, two replicas:
//   - KVBlocks: the H200's 141 GB at vLLM's 0.9 memory utilisation, less 64 GB
//     of bf16 weights and about 2 GB of activations, leaves about 61 GB, or
//     about 232 000 tokens at 256 KiB per token: 14 500 blocks of 16 tokens;
//   - MaxNumSeqs 256 and MaxNumBatchedTokens 8192: vLLM's defaults for the
//     OpenAI server on a large GPU;
//   - prefix caching on, vLLM's default (the trace ran with it off).
func DefaultConfig() Config {
	return Config{
		Name:                "default",
		Servers:             2,
		KVBlocks:            14500,
		PrefixCaching:       true,
		MaxNumSeqs:          256,
		MaxNumBatchedTokens: 8192,
		Cost:                DefaultCostModel(),
	}
}

// Validate reports the first setting an engine cannot run with.
func (c Config) Validate() error {
	switch {
	case c.Servers < 1:
		return fmt.Errorf("config %q: servers = %d, need at least 1", c.Name, c.Servers)
	case c.KVBlocks < 1:
		return fmt.Errorf("config %q: kv_blocks = %d, need at least 1", c.Name, c.KVBlocks)
	case c.MaxNumSeqs < 1:
		return fmt.Errorf("config %q: max_num_seqs = %d, need at least 1", c.Name, c.MaxNumSeqs)
	case c.MaxNumBatchedTokens < 1:
		return fmt.Errorf("config %q: max_num_batched_tokens = %d, need at least 1", c.Name, c.MaxNumBatchedTokens)
	case c.MaxModelLen < 0:
		return fmt.Errorf("config %q: max_model_len = %d, need 0 (none) or more", c.Name, c.MaxModelLen)
	}
	if err := c.Cost.Validate(); err != nil {
		return fmt.Errorf("config %q: %w", c.Name, err)
	}
	if c.Roofline != nil {
		if err := c.Roofline.Validate(); err != nil {
			return fmt.Errorf("config %q: %w", c.Name, err)
		}
	}
	return nil
}

// configOverrides is the set of keys a configuration file or inline spec may
// set; a nil field keeps the base value.
type configOverrides struct {
	Name                *string  `yaml:"name"`
	Servers             *int     `yaml:"servers"`
	KVBlocks            *int     `yaml:"kv_blocks"`
	PrefixCaching       *bool    `yaml:"prefix_caching"`
	MaxNumSeqs          *int     `yaml:"max_num_seqs"`
	MaxNumBatchedTokens *int     `yaml:"max_num_batched_tokens"`
	StepMs              *float64 `yaml:"step_ms"`
	PrefillTokenMs      *float64 `yaml:"prefill_token_ms"`
	DecodeSeqMs         *float64 `yaml:"decode_seq_ms"`
	ContextTokenMs      *float64 `yaml:"context_token_ms"`
	PrefillFreeTokens   *int     `yaml:"prefill_free_tokens"`
	FrontendMs          *float64 `yaml:"frontend_ms"`
}

// ConfigKeys lists the keys ParseConfig accepts, for help texts.
var ConfigKeys = []string{
	"name", "servers", "kv_blocks", "prefix_caching", "max_num_seqs", "max_num_batched_tokens",
	"step_ms", "prefill_token_ms", "decode_seq_ms", "context_token_ms", "prefill_free_tokens", "frontend_ms",
}

func (o configOverrides) apply(c Config) Config {
	setInt := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	setFloat := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	if o.Name != nil {
		c.Name = *o.Name
	}
	if o.PrefixCaching != nil {
		c.PrefixCaching = *o.PrefixCaching
	}
	setInt(&c.Servers, o.Servers)
	setInt(&c.KVBlocks, o.KVBlocks)
	setInt(&c.MaxNumSeqs, o.MaxNumSeqs)
	setInt(&c.MaxNumBatchedTokens, o.MaxNumBatchedTokens)
	setFloat(&c.Cost.StepMs, o.StepMs)
	setFloat(&c.Cost.PrefillTokenMs, o.PrefillTokenMs)
	setFloat(&c.Cost.DecodeSeqMs, o.DecodeSeqMs)
	setFloat(&c.Cost.ContextTokenMs, o.ContextTokenMs)
	setInt(&c.Cost.PrefillFreeTokens, o.PrefillFreeTokens)
	setFloat(&c.Cost.FrontendMs, o.FrontendMs)
	return c
}

// ParseConfig reads one configuration on top of base. spec is "default"
// (base itself), a YAML file (a name ending in .yaml or .yml, or any
// existing file) or an inline list "key=value,key=value". Unknown keys are
// errors, so a typo cannot silently leave a default in place. Without a
// name key, the name is the file's base name or the inline spec itself.
func ParseConfig(spec string, base Config) (Config, error) {
	if spec == "default" {
		base.Name = spec
		return base, base.Validate()
	}
	if isConfigFile(spec) {
		data, err := os.ReadFile(spec)
		if err != nil {
			return Config{}, fmt.Errorf("read config %s: %w", spec, err)
		}
		base.Name = strings.TrimSuffix(filepath.Base(spec), filepath.Ext(spec))
		c, err := decodeYAMLConfig(data, base)
		if err != nil {
			return Config{}, fmt.Errorf("config %s: %w", spec, err)
		}
		return c, nil
	}
	var o configOverrides
	base.Name = spec
	for _, kv := range strings.Split(spec, ",") {
		key, value, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return Config{}, fmt.Errorf("config %q: %q is not key=value (and no such file)", spec, kv)
		}
		if err := o.set(strings.TrimSpace(key), strings.TrimSpace(value)); err != nil {
			return Config{}, fmt.Errorf("config %q: %w", spec, err)
		}
	}
	c := o.apply(base)
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func isConfigFile(spec string) bool {
	ext := strings.ToLower(filepath.Ext(spec))
	if ext == ".yaml" || ext == ".yml" {
		return true
	}
	st, err := os.Stat(spec)
	return err == nil && st.Mode().IsRegular()
}

func decodeYAMLConfig(data []byte, base Config) (Config, error) {
	var o configOverrides
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&o); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("decode yaml: %w", err)
	}
	c := o.apply(base)
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func (o *configOverrides) set(key, value string) error {
	parseInt := func(dst **int) error {
		v, err := strconv.Atoi(value)
		if err != nil {
			return fmt.Errorf("%s: %q is not an integer", key, value)
		}
		*dst = &v
		return nil
	}
	parseFloat := func(dst **float64) error {
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not a number", key, value)
		}
		*dst = &v
		return nil
	}
	switch key {
	case "name":
		o.Name = &value
		return nil
	case "prefix_caching":
		v, err := strconv.ParseBool(value)
		if err != nil {
			return fmt.Errorf("%s: %q is not true or false", key, value)
		}
		o.PrefixCaching = &v
		return nil
	case "servers":
		return parseInt(&o.Servers)
	case "kv_blocks":
		return parseInt(&o.KVBlocks)
	case "max_num_seqs":
		return parseInt(&o.MaxNumSeqs)
	case "max_num_batched_tokens":
		return parseInt(&o.MaxNumBatchedTokens)
	case "step_ms":
		return parseFloat(&o.StepMs)
	case "prefill_token_ms":
		return parseFloat(&o.PrefillTokenMs)
	case "decode_seq_ms":
		return parseFloat(&o.DecodeSeqMs)
	case "context_token_ms":
		return parseFloat(&o.ContextTokenMs)
	case "prefill_free_tokens":
		return parseInt(&o.PrefillFreeTokens)
	case "frontend_ms":
		return parseFloat(&o.FrontendMs)
	}
	return fmt.Errorf("unknown key %q (known: %s)", key, strings.Join(ConfigKeys, ", "))
}
