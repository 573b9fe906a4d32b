import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import { parseInline, parseMarkdown } from "./markdown";
import { Markdown } from "./Markdown";

describe("parseMarkdown", () => {
  it("reads headings, lists and paragraphs", () => {
    const blocks = parseMarkdown("# Brief\n\nSome **bold** text\ncontinued.\n\n- one\n- two\n\n3. three\n4. four\n\n---");
    expect(blocks.map((b) => b.kind)).toEqual(["heading", "paragraph", "list", "list", "rule"]);
    expect(blocks[2]).toMatchObject({ kind: "list", ordered: false, items: [[{ kind: "text", text: "one" }], [{ kind: "text", text: "two" }]] });
    expect(blocks[3]).toMatchObject({ kind: "list", ordered: true, start: 3 });
  });

  it("keeps fenced code as it is", () => {
    expect(parseMarkdown("```\n# not a heading\n```")).toEqual([{ kind: "code", text: "# not a heading" }]);
  });

  it("reads inline marks and leaves lone ones as text", () => {
    expect(parseInline("a **b** *c* `d` 2 * 3 snake_case_name")).toEqual([
      { kind: "text", text: "a " },
      { kind: "strong", children: [{ kind: "text", text: "b" }] },
      { kind: "text", text: " " },
      { kind: "em", children: [{ kind: "text", text: "c" }] },
      { kind: "text", text: " " },
      { kind: "code", text: "d" },
      { kind: "text", text: " 2 * 3 snake_case_name" },
    ]);
  });
});

describe("Markdown", () => {
  it("renders HTML in the text as text, never as markup", () => {
    const html = renderToStaticMarkup(<Markdown source={'# <img src=x onerror="alert(1)">\n\n**<script>bad()</script>**'} />);
    expect(html).not.toContain("<img");
    expect(html).not.toContain("<script");
    expect(html).toContain("&lt;img");
    expect(html).toContain("<strong>&lt;script&gt;");
  });
});
