import { Fragment, type ReactNode } from "react";
import { type Block, type Inline, parseMarkdown } from "./markdown";

function renderInline(nodes: Inline[]): ReactNode {
  return nodes.map((node, i) => {
    switch (node.kind) {
      case "text":
        return <Fragment key={i}>{node.text}</Fragment>;
      case "strong":
        return <strong key={i}>{renderInline(node.children)}</strong>;
      case "em":
        return <em key={i}>{renderInline(node.children)}</em>;
      case "code":
        return <code key={i}>{node.text}</code>;
    }
  });
}

function renderBlock(block: Block, i: number): ReactNode {
  switch (block.kind) {
    case "heading": {
      const Tag = `h${Math.min(6, block.level + 2)}` as "h3";
      return <Tag key={i}>{renderInline(block.children)}</Tag>;
    }
    case "list": {
      const items = block.items.map((item, j) => <li key={j}>{renderInline(item)}</li>);
      return block.ordered ? (
        <ol key={i} start={block.start}>
          {items}
        </ol>
      ) : (
        <ul key={i}>{items}</ul>
      );
    }
    case "paragraph":
      return <p key={i}>{renderInline(block.children)}</p>;
    case "code":
      return (
        <pre key={i}>
          <code>{block.text}</code>
        </pre>
      );
    case "rule":
      return <hr key={i} />;
  }
}

/** Markdown as React elements (headings sit below the board's own). Never raw HTML. */
export function Markdown({ source, className }: { source: string; className?: string }) {
  return <div className={className}>{parseMarkdown(source).map(renderBlock)}</div>;
}
