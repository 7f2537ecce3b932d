package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// FieldError is one problem with the configuration: the field, the value
// found there and the rule it breaks. Its text is "field: value: rule".
type FieldError struct {
	Field string
	// Key is the map key (a signal) under Field, if any.
	Key   string
	Value string
	Rule  string
}

func (e FieldError) path() string {
	switch {
	case e.Field == "":
		return e.Key
	case e.Key == "":
		return e.Field
	}
	return e.Field + "[" + e.Key + "]"
}

func (e FieldError) Error() string {
	return fmt.Sprintf("%s: %q: %s", e.path(), shorten(e.Value), e.Rule)
}

// maxValueText bounds the value quoted in an error: a hostile document's
// value can be a megabyte of nested YAML.
const maxValueText = 200

func shorten(v string) string {
	if len(v) <= maxValueText {
		return v
	}
	cut := maxValueText
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", v[:cut], len(v))
}

// FieldErrors is every problem found in one configuration.
type FieldErrors []FieldError

func (es FieldErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Config is a validated, compiled configuration.
type Config struct {
	// Thresholds are the hard and soft thresholds, including derived
	// allocatableMemory.available ones but excluding containerfs.* (which
	// depend on the filesystem layout; see ThresholdsFor).
	Thresholds                    []Threshold
	PressureTransitionPeriod      time.Duration
	MaxPodGracePeriodSeconds      int64
	LocalStorageCapacityIsolation bool
	EnforceNodeAllocatablePods    bool

	LoopInterval      time.Duration
	PodCleanupTimeout time.Duration
	// VictimReleaseTimeout: a victim of a memory or PID signal still on the
	// node this long after its grace period is braked and awaited no more.
	VictimReleaseTimeout time.Duration

	HousekeepingInterval time.Duration
	MemoryFormula        string

	Notifier       NotifierConfig
	Escalation     EscalationConfig
	RateLimits     RateLimitConfig
	APIUnreachable APIUnreachableConfig
	Exclusions     ExclusionConfig
	NodeStatus     NodeStatusConfig
	Reclaim        ReclaimConfig
	Brake          BrakeConfig
	Loops          LoopsConfig
	MemoryReclaim  MemoryReclaimConfig
	PodPressure    PodPressureConfig
	DryRun         bool

	// Normalized is the document with every default applied.
	Normalized EvictionConfiguration
	// Warnings are accepted settings that have no effect (as the kubelet
	// logs them), e.g. explicit containerfs.* thresholds.
	Warnings []string
	// Notes explain accepted settings whose effect depends on the node,
	// e.g. where a max(5%,500Mi) threshold changes sides.
	Notes []string
}

// NotifierConfig is the compiled NotifierSettings.
type NotifierConfig struct {
	MemcgThresholds bool
	MemoryEvents    bool
	PSIEnabled      bool
	PSIType         string
	PSIStall        time.Duration
	PSIWindow       time.Duration
	PollInterval    time.Duration
	// PollIdleInterval: the poll's longest wait far from every threshold.
	PollIdleInterval time.Duration
}

// EscalationConfig is the compiled PDBEscalationSettings.
type EscalationConfig struct {
	MaxCandidates     int
	SoftMaxCandidates int
	Delete            bool
}

// RateLimitConfig is the compiled RateLimitSettings.
type RateLimitConfig struct {
	MaxPerPass int
	PerMinute  float64
	Burst      int
	Cooldown   time.Duration
}

// APIUnreachableConfig is the compiled APIUnreachableSettings.
type APIUnreachableConfig struct {
	CRIStop bool
	After   time.Duration
}

// ExclusionConfig is the compiled ExclusionSettings.
type ExclusionConfig struct {
	Namespaces    map[string]bool
	PodSelector   labels.Selector // nil: none
	DaemonSetPods bool
	MinPodAge     time.Duration
}

// NodeStatusConfig is the compiled NodeStatusSettings.
type NodeStatusConfig struct {
	// Conditions is the mode: ConditionsOwn, ConditionsStandard, ConditionsBoth or
	// ConditionsNone.
	Conditions       string
	ReassertInterval time.Duration
	// Taints maps a condition to the effect of evictiond's taint for it; a
	// condition with no entry gets no taint.
	Taints map[v1.NodeConditionType]v1.TaintEffect
}

// ReclaimConfig is the compiled ReclaimSettings.
type ReclaimConfig struct {
	CRIEndpoint    string // "": detected on the node
	ContainerGC    bool
	PodLogs        bool
	ImageGC        bool
	ImageMinAge    time.Duration
	PinnedImages   []string
	ImageStateFile string
}

// Upper bounds of durations the kubelet leaves unbounded: beyond them a setting
// no longer does what it says (a soft threshold that must hold for 292 years is
// never acted on; a minimum pod age of a year excludes every pod).
const (
	maxSoftGracePeriod  = 24 * time.Hour
	maxTransitionPeriod = 24 * time.Hour
	maxMinPodAge        = 24 * time.Hour
	maxImageMinAge      = 365 * 24 * time.Hour
)

// Defaults not expressed by the kubelet.
const (
	DefaultPressureTransitionPeriod = 5 * time.Minute
	DefaultLoopInterval             = time.Second
	DefaultPodCleanupTimeout        = 30 * time.Second
	DefaultVictimReleaseTimeout     = 5 * time.Second
	DefaultHousekeepingInterval     = 10 * time.Second
	DefaultPollInterval             = 100 * time.Millisecond
	DefaultPollIdleInterval         = time.Second
	DefaultPSIStall                 = 100 * time.Millisecond
	DefaultPSIWindow                = 2 * time.Second
	DefaultReassertInterval         = time.Second
	DefaultCRIEndpoint              = "unix:///run/containerd/containerd.sock"
	DefaultImageStateFile           = "/var/lib/evictiond/images.json"

	MemoryFormulaWorkingSet   = "workingSet"
	MemoryFormulaMemAvailable = "memAvailable"
)

// Decode reads a configuration document strictly: unknown or duplicate
// fields and values of the wrong type are errors naming the field.
// requireHeader demands apiVersion and kind (a config file); a simulate
// scenario's embedded config may omit them.
func Decode(data []byte, requireHeader bool) (*EvictionConfiguration, FieldErrors) {
	if errs := checkDocument(data); errs != nil {
		return nil, errs
	}
	jsonData, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, yamlError(data, err)
	}
	var cfg EvictionConfiguration
	if string(jsonData) == "null" {
		jsonData = []byte("{}")
	}
	strictErrs, err := kjson.UnmarshalStrict(jsonData, &cfg, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, FieldErrors{decodeError(err, newJSONIndex(jsonData))}
	}
	var errs FieldErrors
	index := newJSONIndex(jsonData)
	for _, se := range strictErrs {
		errs = append(errs, strictError(se, index))
	}
	if len(strictErrs) >= maxReportedErrors {
		// The decoder stops collecting there.
		errs = append(errs, FieldError{Field: "(document)", Value: fmt.Sprintf("%d unknown or duplicate fields listed", len(strictErrs)),
			Rule: "there may be more: the list stops there; fix these first"})
	}
	if requireHeader || cfg.APIVersion != "" || cfg.Kind != "" {
		if cfg.APIVersion != APIVersion {
			errs = append(errs, FieldError{Field: "apiVersion", Value: cfg.APIVersion, Rule: "must be " + APIVersion})
		}
		if cfg.Kind != Kind {
			errs = append(errs, FieldError{Field: "kind", Value: cfg.Kind, Rule: "must be " + Kind})
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return &cfg, nil
}

// Load decodes and compiles a configuration file's contents.
func Load(data []byte) (*Config, FieldErrors) {
	raw, errs := Decode(data, true)
	if errs != nil {
		return nil, errs
	}
	return Compile(*raw)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// YAMLErrorText is a YAML parser error on one line. yaml.v2 puts the useful
// part ("line 4: key \"x\" already set in map") after a "yaml: unmarshal
// errors:" header line, so keeping only the first line would lose it.
func YAMLErrorText(err error) string {
	var parts []string
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line == "yaml: unmarshal errors:" {
			continue
		}
		parts = append(parts, strings.TrimPrefix(line, "yaml: "))
	}
	return strings.Join(parts, "; ")
}

// strictError turns sigs.k8s.io/json's strict errors ("unknown field
// \"a.b\"", "duplicate field \"a\"") into field errors, with the value
// found at the field when it can be located.
func strictError(err error, doc *jsonIndex) FieldError {
	msg := err.Error()
	for _, kind := range []string{"unknown field", "duplicate field"} {
		if rest, ok := strings.CutPrefix(msg, kind+" "); ok {
			field := strings.Trim(rest, `"`)
			value, found := doc.at(field)
			if field == "" || strings.HasSuffix(field, ".") {
				field += "(empty key)" // YAML allows an empty mapping key
			}
			if !found {
				value = field
			}
			return FieldError{Field: field, Value: value, Rule: kind + ": not part of " + Kind}
		}
	}
	return FieldError{Field: "(document)", Value: msg, Rule: "must match the " + Kind + " schema"}
}

// decodeError turns a JSON type error into a field error naming the value
// found at the field (the error itself only knows its JSON type).
func decodeError(err error, doc *jsonIndex) FieldError {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field, value := te.Field, te.Value
		if raw, ok := doc.at(te.Field); ok {
			value = raw
		}
		if field == "" { // the document itself is not a mapping
			field, value = "(document)", string(doc.doc)
		}
		return FieldError{Field: field, Value: value, Rule: "must be of type " + typeName(te.Type.String())}
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return FieldError{Field: "(document)", Value: se.Error(), Rule: "must be valid YAML"}
	}
	return FieldError{Field: "(document)", Value: firstLine(err.Error()), Rule: "must match the " + Kind + " schema"}
}

// jsonIndex finds the JSON text at a dotted field path of a document ("a.b.c"),
// as encoding/json names fields in its errors. Each object on the way is
// decoded once: a hostile document can have a hundred errors, and decoding the
// whole document for each took 400 MB for a quarter megabyte.
type jsonIndex struct {
	doc  []byte
	objs map[string]map[string]json.RawMessage
}

func newJSONIndex(doc []byte) *jsonIndex {
	return &jsonIndex{doc: doc, objs: map[string]map[string]json.RawMessage{}}
}

func (x *jsonIndex) at(path string) (string, bool) {
	if path == "" {
		return "", false
	}
	cur, prefix := json.RawMessage(x.doc), ""
	for _, name := range strings.Split(path, ".") {
		obj, ok := x.objs[prefix]
		if !ok {
			if err := json.Unmarshal(cur, &obj); err != nil {
				obj = nil
			}
			x.objs[prefix] = obj
		}
		next, ok := obj[name]
		if !ok {
			return "", false
		}
		cur, prefix = next, prefix+"."+name
	}
	return string(cur), true
}

func typeName(t string) string {
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "integer"
	case strings.HasPrefix(t, "float"):
		return "number"
	case t == "bool":
		return "boolean (true or false)"
	case t == "string":
		return "string"
	case strings.HasPrefix(t, "map"), strings.HasPrefix(t, "policy."):
		return "mapping"
	case strings.HasPrefix(t, "[]"):
		return "list"
	}
	return t
}

// compiler collects errors while compiling: the first maxReportedErrors, and
// how many more there were.
type compiler struct {
	errs    FieldErrors
	dropped int
}

func (c *compiler) fail(field, key, value, rule string) {
	if len(c.errs) >= maxReportedErrors {
		c.dropped++
		return
	}
	c.errs = append(c.errs, FieldError{Field: field, Key: key, Value: value, Rule: rule})
}

// The modes of nodeStatus.conditions (see kube.ConditionsMode).
const (
	ConditionsOwn      = "own"
	ConditionsStandard = "standard"
	ConditionsBoth     = "both"
	ConditionsNone     = "none"
)

// conditionsMode validates nodeStatus.conditions; unset is "own", and the booleans of
// earlier versions keep their meaning (true: the standard entries, false: none).
func (c *compiler) conditionsMode(v *ConditionsSetting) string {
	if v == nil {
		return ConditionsOwn
	}
	switch s := string(*v); s {
	case ConditionsOwn, ConditionsStandard, ConditionsBoth, ConditionsNone:
		return s
	case "true":
		return ConditionsStandard
	case "false":
		return ConditionsNone
	default:
		c.fail("nodeStatus.conditions", "", s, "must be own (evictiond's own condition types, the default), standard (MemoryPressure, DiskPressure, PIDPressure), both or none")
		return ConditionsOwn
	}
}

// duration parses a duration field; empty yields def. min bounds it below.
func (c *compiler) duration(field, val string, def, min, max time.Duration) time.Duration {
	if val == "" {
		return def
	}
	d, err := time.ParseDuration(val)
	if err != nil {
		c.fail(field, "", val, "must be a duration like 30s, 1m30s or 500ms")
		return def
	}
	if d < min {
		c.fail(field, "", val, fmt.Sprintf("must be at least %v", min))
		return def
	}
	if max > 0 && d > max {
		c.fail(field, "", val, fmt.Sprintf("must be at most %v", max))
		return def
	}
	return d
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

// signalMap resolves a SignalMap's flag form into its mapping, reporting
// flag-form errors under field.
func (c *compiler) signalMap(field string, m *SignalMap, thresholds bool) map[string]string {
	if m == nil {
		return nil
	}
	if !m.IsFlag {
		if m.Values == nil {
			return map[string]string{}
		}
		return m.Values
	}
	values, errs := ParseFlagForm(m.Flag, thresholds)
	for _, e := range errs {
		c.fail(field, e.Key, e.Value, e.Rule)
	}
	return values
}

// Compile validates a configuration and compiles it. Every problem is
// reported, not just the first.
func Compile(raw EvictionConfiguration) (*Config, FieldErrors) {
	c := &compiler{}
	cfg := &Config{}
	maps := c.thresholds(raw, cfg)
	c.general(raw, cfg)
	c.loopAndStats(raw, cfg)
	cfg.Notifier = c.notifier(raw.Notifier)
	c.eviction(raw.Eviction, cfg)
	cfg.Exclusions = c.exclusions(raw.Exclusions, cfg)
	cfg.NodeStatus = c.nodeStatus(raw.NodeStatus)
	cfg.Reclaim = c.reclaim(raw.Reclaim)
	cfg.Brake = c.brake(raw.Brake, cfg.APIUnreachable)
	cfg.Loops = c.loops(raw.EvictionLoops)
	cfg.MemoryReclaim = c.memoryReclaim(raw.MemoryReclaim)
	cfg.PodPressure = c.podPressure(raw.PodPressure)
	cfg.DryRun = raw.DryRun

	if len(c.errs) > 0 {
		return nil, c.result()
	}
	cfg.Normalized = normalize(raw, cfg, maps.hard, maps.soft, maps.grace, maps.minReclaim)
	return cfg, nil
}

// signalMaps are the threshold sections as given (hard with the kubelet's
// defaults applied), for the normalized form.
type signalMaps struct{ hard, soft, grace, minReclaim map[string]string }

// thresholds compiles evictionHard, evictionSoft, their grace periods and
// minimum reclaims, and enforceNodeAllocatable, into cfg.Thresholds.
func (c *compiler) thresholds(raw EvictionConfiguration, cfg *Config) signalMaps {
	hard := c.signalMap("evictionHard", raw.EvictionHard, true)
	soft := c.signalMap("evictionSoft", raw.EvictionSoft, true)
	grace := c.signalMap("evictionSoftGracePeriod", raw.EvictionSoftGracePeriod, false)
	minReclaim := c.signalMap("evictionMinimumReclaim", raw.EvictionMinimumReclaim, false)

	// Defaults (cmd/kubelet/app/server.go): nil -> defaults; merge fills gaps.
	if raw.EvictionHard == nil {
		hard = copyMap(DefaultEvictionHard)
	} else if raw.MergeDefaultEvictionSettings {
		hard = copyMap(hard)
		for k, v := range DefaultEvictionHard {
			if _, ok := hard[k]; !ok {
				hard[k] = v
			}
		}
	}

	checkSignals := func(field string, m map[string]string) {
		for _, k := range sortedKeys(m) {
			if !Signal(k).Valid() {
				c.fail(field, k, m[k], "unsupported eviction signal; one of "+signalList())
			}
		}
	}
	checkSignals("evictionHard", hard)
	checkSignals("evictionSoft", soft)
	checkSignals("evictionSoftGracePeriod", grace)
	checkSignals("evictionMinimumReclaim", minReclaim)

	graces := map[Signal]time.Duration{}
	for _, k := range sortedKeys(grace) {
		if !Signal(k).Valid() {
			continue
		}
		d, err := time.ParseDuration(strings.TrimSpace(grace[k]))
		switch {
		case err != nil:
			c.fail("evictionSoftGracePeriod", k, grace[k], "must be a duration like 1m30s")
		case d < 0:
			c.fail("evictionSoftGracePeriod", k, grace[k], "invalid eviction grace period, must be a positive value")
		case d > maxSoftGracePeriod:
			c.fail("evictionSoftGracePeriod", k, grace[k], fmt.Sprintf("must be at most %v: a soft threshold that must hold longer is never acted on", maxSoftGracePeriod))
		default:
			graces[Signal(k)] = d
		}
	}
	reclaims := map[Signal]*ThresholdValue{}
	for _, k := range sortedKeys(minReclaim) {
		if !Signal(k).Valid() {
			continue
		}
		v, err := parseMinReclaim(Signal(k), minReclaim[k])
		if err != nil {
			c.fail("evictionMinimumReclaim", k, minReclaim[k], err.Error())
			continue
		}
		reclaims[Signal(k)] = v
	}

	var explicitContainerFs []string
	addThresholds := func(field string, m map[string]string, isSoft bool) {
		for _, k := range sortedKeys(m) {
			sig := Signal(k)
			if !sig.Valid() {
				continue
			}
			v, rawVal, err := parseThresholdValue(sig, m[k])
			if err != nil {
				c.fail(field, k, m[k], err.Error())
				continue
			}
			if v == nil {
				continue // 0% / 100%: disabled
			}
			if rule := checkThresholdRange(sig, *v); rule != "" {
				c.fail(field, k, m[k], rule)
				continue
			}
			t := Threshold{Signal: sig, Value: *v, Raw: rawVal, MinReclaim: reclaims[sig]}
			if isSoft {
				gp, ok := graces[sig]
				if !ok {
					if _, given := grace[k]; given {
						continue // its grace period is malformed, already reported
					}
					c.fail(field, k, m[k], "grace period must be specified for the soft eviction threshold in evictionSoftGracePeriod")
					continue
				}
				t.GracePeriod = gp
			}
			if sig == SignalContainerFsAvailable || sig == SignalContainerFsInodesFree {
				explicitContainerFs = append(explicitContainerFs, field+"["+k+"]")
				continue
			}
			cfg.Thresholds = append(cfg.Thresholds, t)
		}
	}
	addThresholds("evictionHard", hard, false)
	addThresholds("evictionSoft", soft, true)
	cfg.Warnings = append(cfg.Warnings, softNotAboveHard(cfg.Thresholds, raw.EvictionHard.given())...)
	cfg.Notes = append(cfg.Notes, boundNotes(cfg.Thresholds)...)
	if len(explicitContainerFs) > 0 {
		cfg.Warnings = append(cfg.Warnings, fmt.Sprintf("%s ignored: containerfs thresholds are derived from the nodefs (or, with a dedicated imagefs, imagefs) thresholds, as the kubelet does", strings.Join(explicitContainerFs, ", ")))
	}

	// enforceNodeAllocatable
	enforce := raw.EnforceNodeAllocatable
	if enforce == nil {
		enforce = []string{"pods"}
	}
	for _, e := range enforce {
		switch e {
		case "pods":
			cfg.EnforceNodeAllocatablePods = true
		case "system-reserved", "kube-reserved", "none":
		default:
			c.fail("enforceNodeAllocatable", "", e, "must be one of pods, system-reserved, kube-reserved, none")
		}
	}
	if cfg.EnforceNodeAllocatablePods {
		cfg.Thresholds = addAllocatableThresholds(cfg.Thresholds)
	}
	sortThresholds(cfg.Thresholds)

	return signalMaps{hard, soft, grace, minReclaim}
}

// general compiles the kubelet's top-level settings besides the thresholds.
func (c *compiler) general(raw EvictionConfiguration, cfg *Config) {
	cfg.PressureTransitionPeriod = c.duration("evictionPressureTransitionPeriod", raw.EvictionPressureTransitionPeriod, DefaultPressureTransitionPeriod, 0, maxTransitionPeriod)
	if cfg.PressureTransitionPeriod == 0 {
		cfg.PressureTransitionPeriod = DefaultPressureTransitionPeriod // as the kubelet's defaulting does
	}
	if raw.EvictionMaxPodGracePeriod < 0 {
		c.fail("evictionMaxPodGracePeriod", "", fmt.Sprint(raw.EvictionMaxPodGracePeriod), "must be >= 0 seconds")
	}
	cfg.MaxPodGracePeriodSeconds = int64(raw.EvictionMaxPodGracePeriod)
	cfg.LocalStorageCapacityIsolation = boolOr(raw.LocalStorageCapacityIsolation, true)
}

// loopAndStats compiles the loop and stats sections.
func (c *compiler) loopAndStats(raw EvictionConfiguration, cfg *Config) {
	cfg.LoopInterval = c.duration("loop.interval", raw.Loop.Interval, DefaultLoopInterval, 10*time.Millisecond, time.Minute)
	cfg.PodCleanupTimeout = c.duration("loop.podCleanupTimeout", raw.Loop.PodCleanupTimeout, DefaultPodCleanupTimeout, time.Second, 10*time.Minute)
	// At least the kubelet's own stop path past the grace period (its pod
	// worker notices the deletion, the runtime's minimum stop grace is 2 s).
	cfg.VictimReleaseTimeout = c.duration("loop.victimReleaseTimeout", raw.Loop.VictimReleaseTimeout, DefaultVictimReleaseTimeout, time.Second, 10*time.Minute)

	cfg.HousekeepingInterval = c.duration("stats.housekeepingInterval", raw.Stats.HousekeepingInterval, DefaultHousekeepingInterval, time.Second, 5*time.Minute)
	cfg.MemoryFormula = raw.Stats.MemoryFormula
	switch cfg.MemoryFormula {
	case "":
		cfg.MemoryFormula = MemoryFormulaWorkingSet
	case MemoryFormulaWorkingSet, MemoryFormulaMemAvailable:
	default:
		c.fail("stats.memoryFormula", "", cfg.MemoryFormula, "must be workingSet or memAvailable")
	}
}

// notifier compiles the notifier section (the kernel fast path).
func (c *compiler) notifier(n NotifierSettings) NotifierConfig {
	out := NotifierConfig{
		MemcgThresholds: boolOr(n.MemcgThresholds, true),
		MemoryEvents:    boolOr(n.MemoryEvents, true),
		PSIEnabled:      boolOr(n.PSI.Enabled, true),
		PSIType:         n.PSI.Type,
		PSIStall:        c.duration("notifier.psi.stall", n.PSI.Stall, DefaultPSIStall, time.Millisecond, 10*time.Second),
		PSIWindow:       c.duration("notifier.psi.window", n.PSI.Window, DefaultPSIWindow, 500*time.Millisecond, 10*time.Second),
		PollInterval:    c.duration("notifier.pollInterval", n.PollInterval, DefaultPollInterval, 10*time.Millisecond, 10*time.Second),
	}
	out.PollIdleInterval = c.duration("notifier.pollIdleInterval", n.PollIdleInterval, max(DefaultPollIdleInterval, out.PollInterval), 10*time.Millisecond, 10*time.Second)
	if out.PollIdleInterval < out.PollInterval {
		c.fail("notifier.pollIdleInterval", "", n.PollIdleInterval, "must be at least notifier.pollInterval ("+out.PollInterval.String()+")")
		out.PollIdleInterval = out.PollInterval
	}
	switch out.PSIType {
	case "":
		out.PSIType = "some"
	case "some", "full":
	default:
		c.fail("notifier.psi.type", "", n.PSI.Type, "must be some or full")
	}
	if out.PSIStall > out.PSIWindow {
		c.fail("notifier.psi.stall", "", n.PSI.Stall, "must not exceed notifier.psi.window ("+out.PSIWindow.String()+")")
	}
	return out
}

// eviction compiles the eviction section: the PDB ladder, rate limits, and the
// local stop while the API server is unreachable. Unset counts take their
// default; an explicit 0 is an error (it used to become the default silently).
func (c *compiler) eviction(e EvictionSettings, cfg *Config) {
	cfg.Escalation = EscalationConfig{
		MaxCandidates:     c.count("eviction.pdbEscalation.maxCandidates", e.PDBEscalation.MaxCandidates, 3, maxEvictionCount),
		SoftMaxCandidates: c.count("eviction.pdbEscalation.softMaxCandidates", e.PDBEscalation.SoftMaxCandidates, 5, maxEvictionCount),
		Delete:            boolOr(e.PDBEscalation.Delete, true)}
	rl := e.RateLimits
	cfg.RateLimits = RateLimitConfig{
		MaxPerPass: c.count("eviction.rateLimits.maxPerPass", rl.MaxPerPass, 3, maxEvictionCount),
		PerMinute:  10,
		Burst:      c.count("eviction.rateLimits.burst", rl.Burst, 3, maxEvictionCount),
		Cooldown:   c.duration("eviction.rateLimits.cooldown", rl.Cooldown, time.Second, 0, time.Hour)}
	if rl.PerMinute != nil {
		switch pm := *rl.PerMinute; {
		case math.IsNaN(pm) || math.IsInf(pm, 0) || pm <= 0:
			c.fail("eviction.rateLimits.perMinute", "", fmt.Sprint(pm), "must be positive (unset: 10); to stop evicting, set dryRun: true")
		case pm > maxPerMinute:
			c.fail("eviction.rateLimits.perMinute", "", fmt.Sprint(pm), fmt.Sprintf("must be at most %d", maxPerMinute))
		default:
			cfg.RateLimits.PerMinute = pm
		}
	}
	cfg.APIUnreachable = APIUnreachableConfig{CRIStop: e.APIUnreachable.CRIStop,
		After: c.duration("eviction.apiUnreachable.after", e.APIUnreachable.After, 10*time.Second, time.Second, time.Hour)}
}

// Bounds of the eviction section's counts and rate: a node runs at most a few
// hundred pods, and more evictions than that per pass or per minute is no limit.
const (
	maxEvictionCount = 1000
	maxPerMinute     = 6000
)

// count compiles an optional count: unset is def; set, it must be 1..max.
func (c *compiler) count(field string, v *int, def, max int) int {
	switch {
	case v == nil:
		return def
	case *v < 1:
		c.fail(field, "", fmt.Sprint(*v), fmt.Sprintf("must be at least 1 (unset: %d)", def))
		return def
	case *v > max:
		c.fail(field, "", fmt.Sprint(*v), fmt.Sprintf("must be at most %d", max))
		return def
	}
	return *v
}

// exclusions compiles the exclusions section.
func (c *compiler) exclusions(x ExclusionSettings, cfg *Config) ExclusionConfig {
	out := ExclusionConfig{Namespaces: map[string]bool{}, DaemonSetPods: boolOr(x.DaemonSetPods, true),
		MinPodAge: c.duration("exclusions.minPodAge", x.MinPodAge, 0, 0, maxMinPodAge)}
	for i, ns := range x.Namespaces {
		field := fmt.Sprintf("exclusions.namespaces[%d]", i)
		if len(validation.IsDNS1123Label(ns)) > 0 {
			c.fail(field, "", ns, "must be a namespace name: lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters (no wildcards, no paths)")
			continue
		}
		if out.Namespaces[ns] {
			c.fail(field, "", ns, "duplicate namespace: each may appear once")
		}
		out.Namespaces[ns] = true
	}
	if x.PodSelector != nil {
		text := string(mustJSON(x.PodSelector))
		sel, err := metav1.LabelSelectorAsSelector(x.PodSelector)
		switch {
		case err != nil:
			c.fail("exclusions.podSelector", "", text, "must be a valid label selector: "+err.Error())
		case sel.Empty():
			// An empty selector matches every pod: evictiond would evict nothing.
			c.fail("exclusions.podSelector", "", text, "must not be empty: an empty selector matches every pod and would disable all eviction (to stop evicting, set dryRun: true; to exclude nothing, remove podSelector)")
		default:
			out.PodSelector = sel
			if w := catchAllSelector(x.PodSelector); w != "" {
				cfg.Warnings = append(cfg.Warnings, "exclusions.podSelector: "+text+": "+w)
			}
		}
	}
	return out
}

// catchAllSelector explains why a selector may match every pod of a node: one
// made only of DoesNotExist and NotIn requirements matches every pod without
// the label, usually all of them. That is a legitimate opt-in ("evict only pods
// labelled evictable"), so it is a warning, not an error.
func catchAllSelector(s *metav1.LabelSelector) string {
	if len(s.MatchLabels) > 0 {
		return ""
	}
	for _, r := range s.MatchExpressions {
		if r.Operator != metav1.LabelSelectorOpDoesNotExist && r.Operator != metav1.LabelSelectorOpNotIn {
			return ""
		}
	}
	return "matches every pod without the label(s) it names, usually every pod on the node: only pods carrying them can be evicted"
}

// nodeStatus compiles the nodeStatus section.
func (c *compiler) nodeStatus(ns NodeStatusSettings) NodeStatusConfig {
	out := NodeStatusConfig{Conditions: c.conditionsMode(ns.Conditions),
		ReassertInterval: c.duration("nodeStatus.reassertInterval", ns.ReassertInterval, DefaultReassertInterval, 100*time.Millisecond, time.Minute),
		Taints:           map[v1.NodeConditionType]v1.TaintEffect{}}
	if boolOr(ns.Taints.Enabled, true) {
		for _, te := range []struct {
			field string
			cond  v1.NodeConditionType
			val   *string
			def   v1.TaintEffect
		}{
			{"nodeStatus.taints.memoryPressure", v1.NodeMemoryPressure, ns.Taints.MemoryPressure, v1.TaintEffectNoSchedule},
			{"nodeStatus.taints.diskPressure", v1.NodeDiskPressure, ns.Taints.DiskPressure, v1.TaintEffectNoSchedule},
			{"nodeStatus.taints.pidPressure", v1.NodePIDPressure, ns.Taints.PIDPressure, v1.TaintEffectNoSchedule},
		} {
			effect := te.def
			if te.val != nil {
				effect = v1.TaintEffect(*te.val)
			}
			switch effect {
			case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule:
				out.Taints[te.cond] = effect
			case "":
			default:
				c.fail(te.field, "", string(effect), `must be NoSchedule, PreferNoSchedule or "" (no taint)`)
			}
		}
	}
	return out
}

// reclaim compiles the reclaim section (node-level reclaim through the CRI).
func (c *compiler) reclaim(r ReclaimSettings) ReclaimConfig {
	out := ReclaimConfig{CRIEndpoint: r.CRIEndpoint, ContainerGC: boolOr(r.ContainerGC, true), PodLogs: boolOr(r.PodLogs, true),
		ImageGC: boolOr(r.ImageGC.Enabled, true), ImageMinAge: c.duration("reclaim.imageGC.minAge", r.ImageGC.MinAge, 2*time.Minute, 0, maxImageMinAge),
		PinnedImages: r.ImageGC.PinnedImages, ImageStateFile: r.ImageGC.StateFile}
	// Empty: the agent detects the node's runtime socket (monitor.DetectRuntimeEndpoint).
	if out.CRIEndpoint != "" && !strings.HasPrefix(out.CRIEndpoint, "unix://") {
		c.fail("reclaim.criEndpoint", "", r.CRIEndpoint, "must be a unix:// socket address")
	}
	for i, img := range r.ImageGC.PinnedImages {
		// An image ID, a reference or a repository is matched exactly: an empty
		// entry or a pattern would pin nothing, silently.
		if img == "" || strings.ContainsAny(img, "*? \t\n") {
			c.fail(fmt.Sprintf("reclaim.imageGC.pinnedImages[%d]", i), "", img, "must be an image ID, a full reference or a repository, matched exactly (no wildcards or spaces)")
		}
	}
	switch p := out.ImageStateFile; {
	case p == "":
		out.ImageStateFile = DefaultImageStateFile
	case !strings.HasPrefix(p, "/"):
		c.fail("reclaim.imageGC.stateFile", "", p, "must be an absolute path")
	case filepath.Clean(p) != p || strings.Contains(p, "/../") || p == "/":
		// The local-stop journal is written beside it: the path must say plainly where.
		c.fail("reclaim.imageGC.stateFile", "", p, "must be a clean absolute file path (no . or .. elements, no trailing or repeated /), like "+DefaultImageStateFile)
	case strings.ContainsAny(p, "\x00\n"):
		c.fail("reclaim.imageGC.stateFile", "", p, "must not contain NUL or newline characters")
	}
	return out
}

// addAllocatableThresholds copies every hard memory.available threshold into
// an allocatableMemory.available one (the kubelet's addAllocatableThresholds),
// unless the user set a hard allocatableMemory.available threshold explicitly.
func addAllocatableThresholds(ts []Threshold) []Threshold {
	for _, t := range ts {
		if t.Signal == SignalAllocatableMemoryAvailable && t.Hard() {
			return ts
		}
	}
	out := ts
	for _, t := range ts {
		if t.Signal == SignalMemoryAvailable && t.Hard() {
			d := t
			d.Signal = SignalAllocatableMemoryAvailable
			d.DerivedFrom = SignalMemoryAvailable
			out = append(out, d)
		}
	}
	return out
}

// normalize fills every default into the document, for `validate` and the
// agent's start-up log.
func normalize(raw EvictionConfiguration, cfg *Config, hard, soft, grace, minReclaim map[string]string) EvictionConfiguration {
	n := raw
	n.APIVersion, n.Kind = APIVersion, Kind
	n.EvictionHard = &SignalMap{Values: orEmpty(hard)}
	n.EvictionSoft = &SignalMap{Values: orEmpty(soft)}
	n.EvictionSoftGracePeriod = &SignalMap{Values: orEmpty(grace)}
	n.EvictionMinimumReclaim = &SignalMap{Values: orEmpty(minReclaim)}
	n.EvictionPressureTransitionPeriod = cfg.PressureTransitionPeriod.String()
	if n.EnforceNodeAllocatable == nil {
		n.EnforceNodeAllocatable = []string{"pods"}
	}
	n.LocalStorageCapacityIsolation = ptr(cfg.LocalStorageCapacityIsolation)
	n.Loop = LoopSettings{Interval: cfg.LoopInterval.String(), PodCleanupTimeout: cfg.PodCleanupTimeout.String(), VictimReleaseTimeout: cfg.VictimReleaseTimeout.String()}
	n.Stats = StatsSettings{HousekeepingInterval: cfg.HousekeepingInterval.String(), MemoryFormula: cfg.MemoryFormula}
	nc := cfg.Notifier
	n.Notifier = NotifierSettings{MemcgThresholds: ptr(nc.MemcgThresholds), MemoryEvents: ptr(nc.MemoryEvents),
		PSI:          PSITriggerSettings{Enabled: ptr(nc.PSIEnabled), Type: nc.PSIType, Stall: nc.PSIStall.String(), Window: nc.PSIWindow.String()},
		PollInterval: nc.PollInterval.String(), PollIdleInterval: nc.PollIdleInterval.String()}
	n.Eviction = EvictionSettings{
		PDBEscalation:  PDBEscalationSettings{MaxCandidates: ptr(cfg.Escalation.MaxCandidates), SoftMaxCandidates: ptr(cfg.Escalation.SoftMaxCandidates), Delete: ptr(cfg.Escalation.Delete)},
		RateLimits:     RateLimitSettings{MaxPerPass: ptr(cfg.RateLimits.MaxPerPass), PerMinute: ptr(cfg.RateLimits.PerMinute), Burst: ptr(cfg.RateLimits.Burst), Cooldown: cfg.RateLimits.Cooldown.String()},
		APIUnreachable: APIUnreachableSettings{CRIStop: cfg.APIUnreachable.CRIStop, After: cfg.APIUnreachable.After.String()},
	}
	n.Exclusions.DaemonSetPods = ptr(cfg.Exclusions.DaemonSetPods)
	n.Exclusions.MinPodAge = cfg.Exclusions.MinPodAge.String()
	n.NodeStatus = NodeStatusSettings{Conditions: ptr(ConditionsSetting(cfg.NodeStatus.Conditions)), ReassertInterval: cfg.NodeStatus.ReassertInterval.String(),
		Taints: TaintSettings{Enabled: ptr(len(cfg.NodeStatus.Taints) > 0 || raw.NodeStatus.Taints.Enabled == nil || *raw.NodeStatus.Taints.Enabled),
			MemoryPressure: ptr(string(cfg.NodeStatus.Taints[v1.NodeMemoryPressure])),
			DiskPressure:   ptr(string(cfg.NodeStatus.Taints[v1.NodeDiskPressure])),
			PIDPressure:    ptr(string(cfg.NodeStatus.Taints[v1.NodePIDPressure]))}}
	rc := cfg.Reclaim
	n.Reclaim = ReclaimSettings{CRIEndpoint: rc.CRIEndpoint, ContainerGC: ptr(rc.ContainerGC), PodLogs: ptr(rc.PodLogs),
		ImageGC: ImageGCSettings{Enabled: ptr(rc.ImageGC), MinAge: rc.ImageMinAge.String(), PinnedImages: rc.PinnedImages, StateFile: rc.ImageStateFile}}
	n.Brake = normalizeBrake(cfg.Brake)
	n.EvictionLoops = normalizeLoops(cfg.Loops)
	n.MemoryReclaim = normalizeMemoryReclaim(cfg.MemoryReclaim)
	n.PodPressure = normalizePodPressure(cfg.PodPressure)
	return n
}

func ptr[T any](v T) *T { return &v }

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func signalList() string { return signalListText }

var signalListText = func() string {
	names := make([]string, 0, len(signals))
	for _, s := range Signals() {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
}()

// MarshalYAML renders the normalized configuration as YAML.
func (c *Config) MarshalYAML() ([]byte, error) {
	return yaml.Marshal(c.Normalized)
}
