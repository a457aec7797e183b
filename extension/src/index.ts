export * from './model';
export { TrajectoryView } from './view';
