package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

// definitionJSON is a definition in JSON output. Document is the document
// as the API stores it (a JSON object), absent in listings.
type definitionJSON struct {
	Name      string          `json:"name"`
	Version   string          `json:"version"`
	CreatedAt string          `json:"createdAt,omitempty"`
	Document  json.RawMessage `json:"document,omitempty"`
}

func definitionCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "definition", Short: "Register and read orchestration definitions (tenant-admin token)"}
	cmd.AddCommand(definitionRegisterCommand(), definitionGetCommand(), definitionListCommand())
	return cmd
}

func definitionRegisterCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "register FILE|-",
		Short: "Register a definition document (YAML or JSON) from a file or stdin",
		Long: `register registers the definition document in FILE (or stdin, for -) under the
name and version it declares. Registering the same document again changes
nothing; another document under a registered name and version fails. An
invalid document fails with exit code 2 and one line per problem. It needs a
token with the tenant-admin role.`,
		Args: cobra.ExactArgs(1),
		RunE: run(func(c *cli, cmd *cobra.Command, args []string) error {
			doc, err := c.readFile(args[0])
			if err != nil {
				return err
			}
			reg, err := c.client().RegisterDefinition(cmd.Context(), doc)
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(map[string]any{"name": reg.Name, "version": reg.Version, "created": reg.Created})
			}
			if reg.Created {
				_, err = fmt.Fprintf(c.out, "registered %s version %s\n", reg.Name, reg.Version)
			} else {
				_, err = fmt.Fprintf(c.out, "%s version %s is already registered with this document; nothing changed\n", reg.Name, reg.Version)
			}
			return err
		}),
	}
}

func definitionGetCommand() *cobra.Command {
	var version string
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Print a definition's document",
		Long: `get prints the document of the definition NAME, its latest version or
--version, as the API stores it (JSON).`,
		Args: cobra.ExactArgs(1),
		RunE: run(func(c *cli, cmd *cobra.Command, args []string) error {
			d, err := c.client().GetDefinition(cmd.Context(), args[0], version)
			if err != nil {
				return err
			}
			if c.json {
				v := definitionJSON{Name: d.Name, Version: d.Version, CreatedAt: jsonTime(d.CreatedAt)}
				if json.Valid(d.Document) {
					v.Document = d.Document
				} else {
					v.Document, _ = json.Marshal(string(d.Document))
				}
				return c.printJSON(v)
			}
			fmt.Fprintf(c.errOut, "# %s version %s, registered %s\n", d.Name, d.Version, tableTime(d.CreatedAt))
			var doc any
			if json.Unmarshal(d.Document, &doc) == nil {
				return c.printJSON(doc)
			}
			_, err = c.out.Write(d.Document)
			return err
		}),
	}
	cmd.Flags().StringVar(&version, "version", "", "the version (default: the latest)")
	return cmd
}

func definitionListCommand() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the registered definitions",
		Args:  cobra.NoArgs,
		RunE: run(func(c *cli, cmd *cobra.Command, _ []string) error {
			out := []definitionJSON{}
			for d, err := range c.client().ListDefinitions(cmd.Context(), name) {
				if err != nil {
					return err
				}
				out = append(out, definitionJSON{Name: d.Name, Version: d.Version, CreatedAt: jsonTime(d.CreatedAt)})
			}
			if c.json {
				return c.printJSON(out)
			}
			t := c.table("NAME", "VERSION", "CREATED")
			for _, d := range out {
				created, _ := time.Parse(time.RFC3339Nano, d.CreatedAt)
				t.row(d.Name, d.Version, tableTime(created))
			}
			return t.flush()
		}),
	}
	cmd.Flags().StringVar(&name, "name", "", "only the versions of this definition")
	return cmd
}
