package jobs

// Override changes parts of a spec for one trigger (e.g. a CI run that wants
// only the lookahead mode, or fewer repetitions). Nil and zero fields keep the
// spec's value.
type Override struct {
	Model         *Model    `json:"model,omitempty" yaml:"model,omitempty"`
	Prompts       *Prompts  `json:"prompts,omitempty" yaml:"prompts,omitempty"`
	PrefillTokens *int      `json:"prefill_tokens,omitempty" yaml:"prefill_tokens,omitempty"`
	DecodeTokens  *int      `json:"decode_tokens,omitempty" yaml:"decode_tokens,omitempty"`
	Modes         []Mode    `json:"modes,omitempty" yaml:"modes,omitempty"`
	Budgets       []Budget  `json:"budgets,omitempty" yaml:"budgets,omitempty"`
	Profiles      []string  `json:"profiles,omitempty" yaml:"profiles,omitempty"`
	Warmup        *int      `json:"warmup,omitempty" yaml:"warmup,omitempty"`
	Repetitions   *int      `json:"repetitions,omitempty" yaml:"repetitions,omitempty"`
	Cooldown      *Duration `json:"cooldown,omitempty" yaml:"cooldown,omitempty"`
	Timeout       *Duration `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	Devices       *Selector `json:"devices,omitempty" yaml:"devices,omitempty"`
	Priority      *int      `json:"priority,omitempty" yaml:"priority,omitempty"`
}

// Apply returns a copy of s with o applied, normalized and validated. Issue
// paths name the spec's fields (e.g. "matrix.modes[0]"). A nil o returns a
// validated copy.
func (s *Spec) Apply(o *Override) (*Spec, error) {
	c := s.Clone()
	if o != nil {
		if o.Model != nil {
			c.Model = *o.Model
		}
		if o.Prompts != nil {
			c.Prompts = Prompts{Set: o.Prompts.Set, Inline: append([]string(nil), o.Prompts.Inline...)}
		}
		setInt(&c.PrefillTokens, o.PrefillTokens)
		setInt(&c.DecodeTokens, o.DecodeTokens)
		if o.Modes != nil {
			c.Matrix.Modes = append([]Mode(nil), o.Modes...)
		}
		if o.Budgets != nil {
			c.Matrix.Budgets = append([]Budget(nil), o.Budgets...)
		}
		if o.Profiles != nil {
			c.Matrix.Profiles = append([]string(nil), o.Profiles...)
		}
		setInt(&c.Warmup, o.Warmup)
		setInt(&c.Repetitions, o.Repetitions)
		if o.Cooldown != nil {
			c.Cooldown = *o.Cooldown
		}
		if o.Timeout != nil {
			c.Timeout = *o.Timeout
		}
		if o.Devices != nil {
			c.Devices = (&Spec{Devices: *o.Devices}).Clone().Devices
		}
		setInt(&c.Priority, o.Priority)
	}
	c.Normalize()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func setInt(dst *int, v *int) {
	if v != nil {
		*dst = *v
	}
}
