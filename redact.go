package pgsweep

import "regexp"

var (
	urlPassword = regexp.MustCompile(`(postgres(?:ql)?://[^:/@\s]*:)[^@\s]*@`)
	kvPassword  = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
)

// RedactSecrets replaces passwords in connection strings inside s with "xxxxx"
// so that errors and logs can quote them safely.
func RedactSecrets(s string) string {
	s = urlPassword.ReplaceAllString(s, "${1}xxxxx@")
	return kvPassword.ReplaceAllString(s, "${1}xxxxx")
}
