// One command line -> an argv list, with the quoting rules of a POSIX shell and nothing else:
// words split on blanks; '...' is literal; "..." is literal except \" \\ \$ \` ; a backslash
// outside quotes keeps the next character. No variables, globs, pipes or redirects: those
// characters reach the program as typed, and `shellFeatures` says so, so nothing is mangled
// silently.

export class ArgvError extends Error {}

export function splitArgv(text) {
  const argv = [];
  let word = "";
  let inWord = false;
  let i = 0;
  const n = text.length;
  while (i < n) {
    const c = text[i];
    if (c === " " || c === "\t" || c === "\n" || c === "\r") {
      if (inWord) argv.push(word);
      word = "";
      inWord = false;
      i += 1;
    } else if (c === "'") {
      const end = text.indexOf("'", i + 1);
      if (end === -1) throw new ArgvError(`a single quote at position ${i + 1} is not closed`);
      word += text.slice(i + 1, end);
      inWord = true;
      i = end + 1;
    } else if (c === '"') {
      let j = i + 1;
      for (;;) {
        if (j >= n) throw new ArgvError(`a double quote at position ${i + 1} is not closed`);
        const d = text[j];
        if (d === '"') break;
        if (d === "\\" && j + 1 < n && '"\\$`\n'.includes(text[j + 1])) {
          if (text[j + 1] !== "\n") word += text[j + 1];
          j += 2;
        } else {
          word += d;
          j += 1;
        }
      }
      inWord = true;
      i = j + 1;
    } else if (c === "\\") {
      if (i + 1 >= n) throw new ArgvError("the command ends with a lone backslash");
      if (text[i + 1] !== "\n") {
        word += text[i + 1];
        inWord = true;
      }
      i += 2;
    } else {
      word += c;
      inWord = true;
      i += 1;
    }
  }
  if (inWord) argv.push(word);
  return argv;
}

/** Shell syntax typed outside quotes that a shell would act on but an argv will not. */
export function shellFeatures(text) {
  const found = new Set();
  let quote = null;
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (quote === "'") {
      if (c === "'") quote = null;
      continue;
    }
    if (c === "\\") {
      i += 1;
      continue;
    }
    if (quote === '"') {
      if (c === '"') quote = null;
      else if (c === "$" || c === "`") found.add(c === "$" ? "$variables" : "`backticks`");
      continue;
    }
    if (c === "'" || c === '"') quote = c;
    else if (c === "|") found.add("| pipes");
    else if (c === ">" || c === "<") found.add("> < redirects");
    else if (c === ";" || c === "&") found.add("; & chaining");
    else if (c === "$") found.add("$variables");
    else if (c === "`") found.add("`backticks`");
    else if (c === "*" || c === "?") found.add("* ? globs");
    else if (c === "~" && (i === 0 || /\s/.test(text[i - 1]))) found.add("~ home");
  }
  return [...found];
}
