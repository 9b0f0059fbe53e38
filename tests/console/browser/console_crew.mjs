// Drives the weir console in headless Chromium: starts samples/crews/research_crew.json (served
// as a workflow of one crew node) from the page with a question, and watches the agents'
// answers arrive, each as soon as its task is done, before the crew's step lands. Prints one
// JSON object (tests/console/console_test.cpp checks it); any console error, page error or
// failed request is listed in "problems".
//
//   node console_crew.mjs http://127.0.0.1:PORT OUTDIR [CHROMIUM]
import fs from 'node:fs';
import path from 'node:path';
import { launch, pageState, pickAssistant, watchedPage } from './page.mjs';

const [base, outDir, chrome = process.env.WEIR_CHROMIUM || '/usr/bin/chromium'] = process.argv.slice(2);
if (!base || !outDir) {
  console.error('usage: node console_crew.mjs http://127.0.0.1:PORT OUTDIR [CHROMIUM]');
  process.exit(2);
}
fs.mkdirSync(outDir, { recursive: true });

const seen = { problems: [] };
const browser = await launch(chrome);
let page;
const shown = (page) => page.$$eval('#messages .msg', ms => ms.map(m => ({
  type: [...m.classList].filter(c => c !== 'msg').join(' '), id: m.dataset.id,
  who: m.querySelector('.who').textContent, text: m.querySelector('.what').textContent })));
try {
  page = await watchedPage(browser, seen.problems);
  await page.goto(`${base}/console`, { waitUntil: 'networkidle2' });
  await page.waitForSelector('#start-graph');
  await pickAssistant(page, 'research_crew',
    '{"messages": [{"type": "human", "content": "paged attention"}]}');
  await page.click('#start-run');
  // The researcher's answer, shown while the writer and the reviewer still work. (A crew on
  // the slow model takes seconds a task, many more under the sanitizers with other tests
  // beside it: waits of a minute, not the page's default 15 s.)
  await page.waitForSelector('#messages .msg.typing .what', { timeout: 60000 });
  seen.status_while_typing = await page.$eval('#thread-status', e => e.textContent);
  seen.while_running = await shown(page);
  await page.screenshot({ path: path.join(outDir, 'run-crew-typing.png'), fullPage: true });
  await page.waitForFunction(() => document.querySelector('#thread-status')?.textContent === 'idle'
    && !document.querySelector('#messages .msg.typing'), { timeout: 120000 });
  seen.messages = await shown(page);
  await page.screenshot({ path: path.join(outDir, 'run-crew.png'), fullPage: true });
} catch (e) {
  seen.problems.push(`failed: ${e.message.split('\n')[0]}`);
  seen.at_failure = await pageState(page);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(seen) + '\n');
