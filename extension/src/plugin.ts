/**
 * The application plugins: the notebook tracker the renderer's Stop and Fork buttons use, and the
 * TEA sidebar with its main-area trajectory panels.
 */

import {
  ILabShell,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { MainAreaWidget } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { setTracker } from './context';
import { IRunMeta } from './model';
import { TeaSidebar } from './sidebar';
import { TrajectoryView } from './view';

const ICON = new LabIcon({
  name: 'tea-notebook:icon',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24">' +
    '<path class="jp-icon3" fill="#616161" d="M4 6h13v7a5 5 0 0 1-5 5H9a5 5 0 0 1-5-5V6zm13 2h1.5a2.5 2.5 0 0 1 0 5H17v-2h1.5a.5.5 0 0 0 0-1H17V8zM3 20h15v1.5H3z"/>' +
    '</svg>'
});

const tracking: JupyterFrontEndPlugin<void> = {
  id: 'tea-notebook-jupyterlab:tracker',
  description: 'Lets trajectory outputs find their notebook (Stop and Fork buttons).',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker) => {
    setTracker(tracker, app);
  }
};

const sidebar: JupyterFrontEndPlugin<void> = {
  id: 'tea-notebook-jupyterlab:sidebar',
  description: 'The TEA sidebar: the workspace of the current notebook kernel.',
  autoStart: true,
  requires: [INotebookTracker, ILabShell],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker, shell: ILabShell) => {
    const open = (run: string, data: unknown, metadata: Record<string, unknown>): void => {
      const content = new Widget();
      content.addClass('jp-TeaTrajectory');
      content.addClass('jp-TeaTrajectoryPanel');
      const view = new TrajectoryView({});
      content.node.append(view.node);
      const meta = (metadata['application/vnd.tea.trajectory+json'] ?? {}) as IRunMeta;
      view.update(data, meta);
      const panel = new MainAreaWidget({ content });
      panel.id = `tea-run-${run}`;
      panel.title.label = `run ${run.slice(0, 8)}`;
      panel.title.icon = ICON;
      panel.title.closable = true;
      shell.add(panel, 'main');
      shell.activateById(panel.id);
      requestAnimationFrame(() => view.relayout());
    };
    const widget = new TeaSidebar(tracker, open);
    widget.title.icon = ICON;
    shell.add(widget, 'left', { rank: 600 });
  }
};

export default [tracking, sidebar];
