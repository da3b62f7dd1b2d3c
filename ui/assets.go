package ui

import (
	"embed"
	"html/template"
	"io/fs"
	"net/http"
)

//go:embed static
var staticFS embed.FS

//go:embed templates/*.html
var templateFS embed.FS

// staticFiles serves the embedded front-end files; their names do not
// change between requests of one build, so browsers may keep them an hour.
func staticFiles() http.Handler {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})
}

// pages are the templates, parsed once: each page template with the layout.
var pages = func() map[string]*template.Template {
	names := []string{"overview", "queue", "lanes", "message", "maintenance", "leases", "retention", "policy", "health", "error"}
	out := make(map[string]*template.Template, len(names))
	for _, n := range names {
		out[n] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/findings.html", "templates/"+n+".html"))
	}
	return out
}()
