// Drives the weir console in headless Chromium: starts `talk` (an llm node that answers in the
// messages channel) from the page and watches its reply arrive piece by piece in the Messages
// card before its step lands. Prints one JSON object (tests/console/console_test.cpp checks it);
// any console error, page error or failed request is listed in "problems".
//
//   node console_tokens.mjs http://127.0.0.1:PORT OUTDIR [CHROMIUM]
import fs from 'node:fs';
import path from 'node:path';
import { launch, pageState, pickAssistant, watchedPage } from './page.mjs';

const [base, outDir, chrome = process.env.WEIR_CHROMIUM || '/usr/bin/chromium'] = process.argv.slice(2);
if (!base || !outDir) {
  console.error('usage: node console_tokens.mjs http://127.0.0.1:PORT OUTDIR [CHROMIUM]');
  process.exit(2);
}
fs.mkdirSync(outDir, { recursive: true });

const seen = { problems: [] };
const browser = await launch(chrome);
let page;
try {
  page = await watchedPage(browser, seen.problems);
  // The reply must still be generating when the page joins the run's stream. On a loaded
  // machine (CI runs this beside the whole suite) the run can end first, and the page then
  // shows only the landed message: the run is started again, up to three times.
  seen.attempts = 0;
  while (!seen.typing_grew && seen.attempts < 3) {
    ++seen.attempts;
    await page.goto(`${base}/console`, { waitUntil: 'networkidle2' });
    await page.waitForSelector('#start-graph');
    await pickAssistant(page, 'talk', '{"messages": [{"type": "human", "content": "Tell me a story"}]}');
    // Every state of the typing message is recorded as the page renders it, so a reply that
    // grows between two polls is still seen growing.
    await page.evaluate(() => {
      window.__typing = {};
      const look = () => {
        const m = document.querySelector('#messages .msg.typing');
        const what = m?.querySelector('.what');
        if (!m || !what) return;
        const lens = (window.__typing[m.dataset.id] ||= []);
        if (lens[lens.length - 1] !== what.textContent.length) lens.push(what.textContent.length);
      };
      new MutationObserver(look).observe(document.body,
        { subtree: true, childList: true, characterData: true });
    });
    await page.click('#start-run');
    // The reply being generated: a message marked as typing, whose text grows; or the reply
    // landed before the page saw it typed.
    await page.waitForFunction(() => Object.values(window.__typing).some(l => l.length >= 2)
      || (document.querySelector('#messages .msg.ai') && !document.querySelector('#messages .msg.typing')),
      { timeout: 120000 });
    const typing = await page.evaluate(() => window.__typing);
    for (const [id, lens] of Object.entries(typing)) {
      if (lens.length >= 2 && lens[lens.length - 1] > lens[0]) {
        seen.typing_grew = true;
        seen.typing_id = id;
      }
    }
  }
  await page.screenshot({ path: path.join(outDir, 'run-typing.png'), fullPage: true });
  // The step lands: the same message, no longer typing.
  await page.waitForFunction(() => document.querySelector('#thread-status')?.textContent === 'idle'
    && !document.querySelector('#messages .msg.typing'), { timeout: 120000 });
  seen.messages = await page.$$eval('#messages .msg', ms => ms.map(m => ({ type: [...m.classList].filter(c => c !== 'msg').join(' '), id: m.dataset.id, text: m.querySelector('.what').textContent })));
} catch (e) {
  seen.problems.push(`failed: ${e.message.split('\n')[0]}`);
  seen.at_failure = await pageState(page);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(seen) + '\n');
