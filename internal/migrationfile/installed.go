package migrationfile

import (
	"strings"
)

// Installed maps each function, procedure and view (Statement.Key) to the
// text of the statement that last installed it.
type Installed map[string]string

// Apply records what sts install and drop, in order.
func (in Installed) Apply(sts []Statement) {
	for _, s := range sts {
		if s.Key != "" {
			in[s.Key] = s.Text
		}
		for _, d := range s.Drops {
			if name, ok := strings.CutSuffix(d, "(*)"); ok {
				for k := range in {
					if strings.HasPrefix(k, name+"(") {
						delete(in, k)
					}
				}
				continue
			}
			delete(in, d)
		}
	}
}

// Changed returns the statements of f whose text differs from what in
// holds for them, after the file's tern actions; "" when none differs.
func (in Installed) Changed(f FunctionFile) string {
	var actions, changed []string
	for _, s := range f.Statements {
		switch {
		case s.Template:
			actions = append(actions, s.Text)
		case in[s.Key] != s.Text:
			changed = append(changed, s.Text)
		}
	}
	if len(changed) == 0 {
		return ""
	}
	var b strings.Builder
	for _, a := range actions {
		b.WriteString(a + "\n")
	}
	b.WriteString(strings.Join(changed, "\n\n") + "\n")
	return b.String()
}

// Missing lists the objects of files whose text in does not hold: what no
// migration installs as sql/functions writes it.
func (in Installed) Missing(files []FunctionFile) []string {
	var out []string
	for _, f := range files {
		for _, s := range f.Statements {
			if !s.Template && in[s.Key] != s.Text {
				out = append(out, f.Path+": "+s.Key)
			}
		}
	}
	return out
}
