/**
 * A page reloaded while a `%%agent` cell runs, before the notebook was saved, has no output for the
 * run: the cell shows what the file last held. The kernel's live updates still reach this page (every
 * client gets the kernel's broadcasts) and name the cell they belong to (`cell` in their metadata):
 * put the live view back in that cell, where the renderer (mime.ts) goes on following the run.
 */

import type { ICodeCellModel } from '@jupyterlab/cells';
import type { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import type { KernelMessage } from '@jupyterlab/services';

import { IRunMeta, MIME_TYPE } from './model';

const DISPLAYS = new Set(['display_data', 'update_display_data']);

/** The cell model of `panel` with id `id` that shows no output of run `run` and runs nothing in this page. */
export function orphanCell(panel: NotebookPanel, id: string, run: string): ICodeCellModel | null {
  const cells = panel.content.model?.cells;
  if (!cells) {
    return null;
  }
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell.id !== id || cell.type !== 'code') {
      continue;
    }
    const code = cell as ICodeCellModel;
    if (code.executionState === 'running') {
      return null; // it runs in this page: its outputs come to it
    }
    for (let k = 0; k < code.outputs.length; k++) {
      const meta = (code.outputs.get(k).metadata?.[MIME_TYPE] ?? {}) as IRunMeta;
      if (meta.run_id === run) {
        return null; // the view is there (restored from a save, or put back already)
      }
    }
    return code;
  }
  return null;
}

/** Watch every notebook's kernel broadcasts for live runs whose cell lost its view to a reload. */
export function watchLiveRuns(tracker: INotebookTracker): void {
  const watch = (panel: NotebookPanel): void => {
    const onMessage = (_: unknown, msg: KernelMessage.IMessage): void => {
      if (msg.channel !== 'iopub' || !DISPLAYS.has(msg.header.msg_type)) {
        return;
      }
      const content = msg.content as { data?: Record<string, unknown>; metadata?: Record<string, unknown> };
      const payload = content.data?.[MIME_TYPE] as { live?: boolean } | undefined;
      const meta = (content.metadata?.[MIME_TYPE] ?? {}) as IRunMeta & { cell?: string };
      if (!payload || payload.live !== true || !meta.cell || !meta.run_id || !meta.kernel) {
        return;
      }
      if (meta.kernel !== panel.sessionContext.session?.kernel?.id) {
        return;
      }
      const cell = orphanCell(panel, meta.cell, meta.run_id);
      if (cell) {
        // the cell was run again in the kernel: what the file held is gone there too
        cell.outputs.clear();
        cell.outputs.add({
          output_type: 'display_data',
          data: content.data as never,
          metadata: (content.metadata ?? {}) as never
        });
      }
    };
    panel.sessionContext.iopubMessage.connect(onMessage);
    panel.disposed.connect(() => panel.sessionContext.iopubMessage.disconnect(onMessage));
  };
  tracker.forEach(watch);
  tracker.widgetAdded.connect((_, panel) => watch(panel));
}
