package engine

import (
	"embed"
	"io/fs"
	"slices"
)

//go:embed examples/*.yaml
var examples embed.FS

// Examples returns the example definitions that ship with the engine (an
// order fulfilment with a race and an approval, a nightly report that
// continues as new, a fan-out with a sub-orchestration), as YAML documents
// sorted by file name. `orchard dev --demo` registers them; tests run them.
func Examples() [][]byte {
	names, _ := fs.Glob(examples, "examples/*.yaml")
	slices.Sort(names)
	docs := make([][]byte, 0, len(names))
	for _, n := range names {
		doc, _ := examples.ReadFile(n)
		docs = append(docs, doc)
	}
	return docs
}
