package pgsweep

import "testing"

func TestRedactSecrets(t *testing.T) {
	cases := map[string]string{
		"postgres://u:pw@h:5/db":              "postgres://u:xxxxx@h:5/db",
		"failed: postgresql://a:b%40c@h/db x": "failed: postgresql://a:xxxxx@h/db x",
		"host=h password=secret user=u":       "host=h password=xxxxx user=u",
		"host=h password='se cret' user=u":    "host=h password=xxxxx user=u",
		"postgres://u@h/db (no password)":     "postgres://u@h/db (no password)",
		"PASSWORD = hunter2":                  "PASSWORD = xxxxx",
	}
	for in, want := range cases {
		if got := RedactSecrets(in); got != want {
			t.Errorf("RedactSecrets(%q) = %q, want %q", in, got, want)
		}
	}
}
